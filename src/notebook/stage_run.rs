//! One stage of a run folder as a notebook shows it: where its figures come from, its tables,
//! texts, views (tables and charts from the stage's declared views) and findings.

use crate::error::{LabError, Result};
use crate::experiments::find;
use crate::frame::{groups, present_columns};
use crate::report::chart::draw;
use crate::report::display::{show_chart, show_tables};
use crate::report::svg::draw_svg;
use crate::report::Table;
use crate::session::run_folder::RunFolder;
use crate::stage::View;

/// One stage of a run folder, as a notebook shows it. It holds only the folder and the stage's
/// name (a notebook keeps it across cells); the views come from the registry when asked for.
#[derive(Debug, Clone)]
pub struct StageRun {
    pub run: RunFolder,
    pub stage: String,
    /// A run this kernel made (Mode::Live): it may lack rows a template names (a CPU run has no
    /// PyTorch rows), shown as missing; in a committed or computed run such a field is an error.
    pub live: bool,
}

impl StageRun {
    /// Where the figures come from: the run folder (relative to the lab), its GPU, date and
    /// command (the program's name without the folder it ran from).
    pub fn describe(&self) -> String {
        let m = &self.run.manifest;
        let root = super::live::lab_root();
        let dir = self.run.dir.strip_prefix(&root).unwrap_or(&self.run.dir).display().to_string();
        let dir = dir.strip_prefix("notebooks/../").unwrap_or(&dir).to_string();
        // A machine's folders (the binary's, a runner's --out) shown by their last name only.
        let command: Vec<String> = m
            .command
            .split(' ')
            .enumerate()
            .map(|(i, t)| match std::path::Path::new(t).file_name() {
                Some(f) if t.starts_with('/') || i == 0 => {
                    format!("{}{}", if i == 0 { "" } else { "…/" }, f.to_string_lossy())
                }
                _ => t.to_string(),
            })
            .collect();
        format!(
            "运行 run: {dir}\n{} on {}, card {}, {}\n命令 command: {}",
            m.model,
            m.env.gpu.clone().unwrap_or_else(|| m.env.device.clone()),
            m.card_name(),
            m.started,
            command.join(" ")
        )
    }

    /// A table of the stage, whole.
    pub fn table(&self, name: &str) -> Result<Table> {
        Ok(self.run.table(&self.stage, name)?.into())
    }

    /// A text the stage wrote (an OOM's memory summary), if it wrote it.
    pub fn text(&self, name: &str) -> Result<Option<String>> {
        self.run.text(&self.stage, name)
    }

    fn view(&self, name: &str) -> Result<View> {
        let views = find(&self.stage).map(|s| s.views()).unwrap_or_default();
        views.iter().find(|v| v.name == name).cloned().ok_or_else(|| {
            let names: Vec<&str> = views.iter().map(|v| v.name).collect();
            LabError::input(format!("stage {} has no view `{name}`: {}", self.stage, names.join(", ")))
        })
    }

    /// The view's table(s) and chart(s), one per group whose label contains `only` ("" for all).
    fn render(&self, name: &str, only: &str, tables: bool, charts: bool) -> Result<()> {
        let view = self.view(name)?;
        // A table only some runs write (the F32 OOM's, on a card it does not fit): say so, as
        // for a group with no rows below, rather than fail the cell.
        let wrote = self.run.manifest.stage(&self.stage).is_some_and(|s| s.tables.contains_key(view.table));
        if !wrote {
            println!(
                "{}: this run wrote no table {} (model {}, {}, card {})",
                view.name,
                view.table,
                self.run.manifest.model,
                self.run.manifest.env.device,
                self.run.manifest.card_name()
            );
            return Ok(());
        }
        let df = self.run.table(&self.stage, view.table)?;
        let picked: Vec<_> = groups(&df, view.group_by)?.into_iter().filter(|(l, _)| l.contains(only)).collect();
        if picked.is_empty() {
            // Say so rather than show an empty cell: e.g. PyTorch's rows exist only in a run given
            // the reference script's output (the committed GPU runs), not in a Live run.
            println!(
                "{}: this run has no rows where {only} (model {}, {})",
                view.name, self.run.manifest.model, self.run.manifest.env.device
            );
            return Ok(());
        }
        let mut shown = Vec::new();
        for (label, part) in picked {
            let caption =
                if label.is_empty() { view.caption.to_string() } else { format!("{} — {label}", view.caption) };
            if tables {
                shown.push((present_columns(&part, view.columns)?, caption));
            }
            if let (true, Some(chart)) = (charts, &view.chart) {
                show_chart(
                    &draw(chart, &part)?,
                    Some(&draw_svg(chart, &part)?),
                    &format!("{}-{name}-{label}", self.stage),
                );
            }
        }
        if !shown.is_empty() {
            show_tables(&shown);
        }
        Ok(())
    }

    /// Shows a view's table(s), every group.
    pub fn show(&self, view: &str) -> Result<()> {
        self.render(view, "", true, false)
    }

    /// Shows a view's table(s) for the groups whose label contains `only`, e.g. "precision=bf16, logits=all".
    pub fn show_only(&self, view: &str, only: &str) -> Result<()> {
        self.render(view, only, true, false)
    }

    /// Shows a view's chart(s) for the groups whose label contains `only` ("" for all).
    pub fn chart(&self, view: &str, only: &str) -> Result<()> {
        self.render(view, only, false, true)
    }

    /// The stage's findings: measured, predicted, the report's figure, the ceiling.
    pub fn findings(&self) -> Result<Table> {
        let mut m = self.run.manifest.clone();
        m.stages.retain(|s| s.name == self.stage);
        Ok(crate::session::run_folder::findings_table(&m)?.into())
    }
}
