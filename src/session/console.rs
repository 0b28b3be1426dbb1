//! The run's console: lines printed and kept for console.txt, progress bars below them.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Prints and keeps a copy for console.txt; progress bars stay below the printed lines.
pub struct Console {
    pub text: String,
    /// Print nothing (notebooks show tables instead).
    pub silent: bool,
    multi: Option<MultiProgress>,
    stage_bar: Option<ProgressBar>,
}

impl Console {
    pub fn new(silent: bool, bars: bool) -> Self {
        let multi = (bars && !silent).then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Self { text: String::new(), silent, multi, stage_bar: None }
    }

    pub fn line(&mut self, s: impl AsRef<str>) {
        let s = s.as_ref();
        if !self.silent {
            match &self.multi {
                Some(m) => m.suspend(|| println!("{s}")),
                None => println!("{s}"),
            }
        }
        self.text.push_str(s);
        self.text.push('\n');
    }

    /// A bar of `len` units for a long step (loading tensors); hidden without bars.
    pub fn bar(&self, len: u64, what: &str, unit: &str) -> ProgressBar {
        let Some(m) = &self.multi else { return ProgressBar::hidden() };
        let pb = m.add(ProgressBar::new(len));
        if let Ok(style) =
            ProgressStyle::with_template(&format!("  {{msg:>14}} [{{bar:40}}] {{pos}}/{{len}} {unit} {{elapsed}}"))
        {
            pb.set_style(style.progress_chars("=> "));
        }
        pb.set_message(what.to_string());
        pb
    }

    /// The whole run's bar: one unit a stage, the time left in its message; hidden without bars.
    pub fn run_bar(&self, stages: usize) -> ProgressBar {
        let Some(m) = &self.multi else { return ProgressBar::hidden() };
        let pb = m.add(ProgressBar::new(stages as u64));
        if let Ok(style) = ProgressStyle::with_template("run [{bar:30}] stage {pos}/{len}, {elapsed} so far, {msg}") {
            pb.set_style(style.progress_chars("=> "));
        }
        pb
    }

    /// Names the step in hand on the stage's spinner.
    pub fn step(&self, what: impl Into<String>) {
        if let Some(pb) = &self.stage_bar {
            pb.set_message(what.into());
        }
    }

    pub fn begin_stage(&mut self, title: &str) {
        if let Some(m) = &self.multi {
            let pb = m.add(ProgressBar::new_spinner());
            if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix} — {msg} {elapsed}") {
                pb.set_style(style);
            }
            pb.set_prefix(title.to_string());
            pb.enable_steady_tick(std::time::Duration::from_millis(200));
            self.stage_bar = Some(pb);
        }
    }

    pub fn end_stage(&mut self) {
        if let Some(pb) = self.stage_bar.take() {
            pb.finish_and_clear();
        }
    }
}
