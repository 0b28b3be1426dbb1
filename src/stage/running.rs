//! Running stages in a session: one stage (`run`, which writes its tables and records it), several
//! in turn (`run_in_turn`, the one loop of `vram-lab run`, a stage's command and a notebook), and a
//! stage's config with a notebook's settings put over it.

use super::AnyStage;
use crate::error::{LabError, Result};
use crate::frame::console_groups;
use crate::session::run_folder::{StageRecord, StageStatus};
use crate::session::Session;
use std::collections::BTreeMap;
use std::time::Instant;

/// A stage's config with `settings` (a JSON object of its fields, `{"gpus": 2}`) put over it; a
/// name the config does not have is refused, never ignored, and each value passes the checks of
/// the flag it stands for (its range, a list naming a value once), as on the command line.
pub fn with_settings(stage: &dyn AnyStage, mut config: serde_json::Value, settings: &str) -> Result<serde_json::Value> {
    let shown = settings.escape_debug();
    let given: serde_json::Value = serde_json::from_str(settings)
        .map_err(|e| LabError::input(format!("the settings `{shown}` are not JSON: {e}")))?;
    let given =
        given.as_object().ok_or_else(|| LabError::input(format!("the settings `{shown}` are not a JSON object")))?;
    stage.check_settings(given)?;
    if let Some(c) = config.as_object_mut() {
        for (k, v) in given {
            if !c.contains_key(k) {
                let known: Vec<&str> = c.keys().map(String::as_str).collect();
                return Err(LabError::input(format!(
                    "the stage has no setting `{}`: {}",
                    k.escape_debug(),
                    known.join(", ")
                )));
            }
            c.insert(k.clone(), v.clone());
        }
    }
    Ok(config)
}

/// How a run of several stages ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Completed,
    /// Ctrl-C: the stages left were not run; the run folder is still to be written.
    Interrupted,
}

/// Runs `stages` in turn in one session, each with its config: the one loop behind `vram-lab run`,
/// a stage's own command and a notebook's run. `before(i)` is called before stage `i` (a progress
/// bar's step). A failed stage is recorded and the next one runs (`run`); Ctrl-C ends the loop.
pub fn run_in_turn(
    session: &mut Session,
    stages: Vec<(&dyn AnyStage, serde_json::Value)>,
    mut before: impl FnMut(usize),
) -> Result<Ended> {
    for (i, (stage, config)) in stages.into_iter().enumerate() {
        before(i);
        match run(session, stage, config) {
            Ok(()) => {}
            Err(LabError::Interrupted) => return Ok(Ended::Interrupted),
            Err(e) => return Err(e),
        }
    }
    Ok(Ended::Completed)
}

/// Runs one stage in `session`: writes its tables and texts into `<run>/<stage>/`, prints its
/// views and records it in the manifest. A failed stage is recorded and the next one still runs;
/// only Ctrl-C comes back as an error.
pub fn run(session: &mut Session, stage: &dyn AnyStage, config: serde_json::Value) -> Result<()> {
    session.check_stop()?;
    session.say(format!("\n=== {} ===", stage.title()));
    session.begin_stage(stage.title());
    session.probe.rebase_context();
    let t0 = Instant::now();
    let result = stage.run(session, &config);
    session.end_stage();
    let mut record = StageRecord {
        name: stage.name().into(),
        title: stage.title().into(),
        config,
        status: StageStatus::Done,
        error: None,
        seconds: t0.elapsed().as_secs_f64(),
        tables: BTreeMap::new(),
        texts: BTreeMap::new(),
        findings: Vec::new(),
    };
    let out = match result {
        Ok(out) => out,
        Err(e) => {
            record.status =
                if matches!(e, LabError::Interrupted) { StageStatus::Interrupted } else { StageStatus::Failed };
            session.say(format!(
                "stage {} {}: {e}",
                stage.name(),
                if record.status == StageStatus::Failed { "failed" } else { "interrupted" }
            ));
            record.error = Some(e.to_string());
            session.record_failure(record, e.is_input())?;
            return if matches!(e, LabError::Interrupted) { Err(e) } else { Ok(()) };
        }
    };
    session.write_stage(&mut record, &out.tables, &out.texts)?;
    record.findings = out.findings;
    for view in stage.views() {
        if let Some((_, df)) = out.tables.iter().find(|(n, _)| n == view.table) {
            let text = console_groups(df, view.caption, view.columns, view.group_by)?;
            session.say(text);
        }
    }
    session.say(format!("stage {} done in {:.1} s", stage.name(), record.seconds));
    session.record(record)
}
