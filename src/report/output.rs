//! The output folder every stage shares: one CSV per table, `env.json` (machine, versions,
//! command line, date) and `console.txt` (what the run printed), so a notebook can replay it.

use super::env::Env;
use crate::error::{LabError, Result};
use polars::prelude::*;
use std::path::{Path, PathBuf};

pub struct OutputDir {
    pub path: PathBuf,
}

impl OutputDir {
    pub fn create(path: &Path) -> Result<Self> {
        std::fs::create_dir_all(path)
            .map_err(|e| LabError::input(format!("cannot create output folder {}: {e}", path.display())))?;
        Ok(Self { path: path.to_path_buf() })
    }

    pub fn write_csv(&self, name: &str, df: &DataFrame) -> Result<PathBuf> {
        let p = self.path.join(format!("{name}.csv"));
        let mut f = std::fs::File::create(&p)?;
        CsvWriter::new(&mut f).finish(&mut df.clone())?;
        Ok(p)
    }

    pub fn write_text(&self, name: &str, text: &str) -> Result<PathBuf> {
        let p = self.path.join(name);
        std::fs::write(&p, text)?;
        Ok(p)
    }

    pub fn write_env(&self, env: &Env) -> Result<PathBuf> {
        self.write_text("env.json", &serde_json::to_string_pretty(env)?)
    }

    /// Reads back a table a run wrote (what replay mode does).
    pub fn read_csv(dir: &Path, name: &str) -> Result<DataFrame> {
        let p = dir.join(format!("{name}.csv"));
        if !p.is_file() {
            return Err(LabError::input(format!("no table {} in {}", name, dir.display())));
        }
        Ok(CsvReadOptions::default().with_has_header(true).try_into_reader_with_file_path(Some(p))?.finish()?)
    }
}

/// Prints to stdout and keeps a copy for console.txt.
#[derive(Default)]
pub struct Console {
    pub text: String,
    pub quiet: bool,
}

impl Console {
    pub fn line(&mut self, s: impl AsRef<str>) {
        if !self.quiet {
            println!("{}", s.as_ref());
        }
        self.text.push_str(s.as_ref());
        self.text.push('\n');
    }
}
