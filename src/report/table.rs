//! `Table`: a stage's table as a notebook holds it. Two evcxr facts shape it: a variable's type
//! must be nameable from the notebook (polars' DataFrame lives in polars-core, which a notebook
//! cannot name), and each cell links its own copy of polars, whose hashers differ from cell to
//! cell, so a DataFrame whose schema one cell cached cannot find its columns in the next. A Table
//! therefore keeps the columns and builds a fresh DataFrame for every use.

use crate::error::{LabError, Result};
use polars::prelude::{Column, DataFrame};

#[derive(Debug, Clone)]
pub struct Table {
    columns: Vec<Column>,
}

impl From<DataFrame> for Table {
    fn from(df: DataFrame) -> Self {
        Self { columns: df.columns().to_vec() }
    }
}

impl Table {
    /// A DataFrame of the columns, schema built afresh by the caller's code.
    pub fn df(&self) -> Result<DataFrame> {
        Ok(DataFrame::new_infer_height(self.columns.clone())?)
    }

    pub fn height(&self) -> usize {
        self.columns.first().map(|c| c.len()).unwrap_or(0)
    }

    /// Rows of `other` below these (same columns).
    pub fn vstack(&self, other: &Table) -> Result<Table> {
        Ok(self.df()?.vstack(&other.df()?)?.into())
    }

    /// Shows the table: HTML in a notebook, text elsewhere.
    pub fn show(&self, caption: &str) -> Result<()> {
        super::display::show_table(&self.df()?, caption);
        Ok(())
    }

    /// Shows only the columns named, in that order.
    pub fn show_columns(&self, cols: &[&str], caption: &str) -> Result<()> {
        super::display::show_columns(&self.df()?, cols, caption)
    }

    /// Draws the chart of `stage`'s view `view` over this table, one per group of the view: rows
    /// of several runs put together (`vstack`) make one figure, e.g. decode over 1, 2 and 4 GPUs.
    pub fn chart(&self, stage: &str, view: &str) -> Result<()> {
        let found = crate::experiments::find(stage).ok_or_else(|| LabError::input(format!("no stage `{stage}`")))?;
        let views = found.views();
        let v = views
            .iter()
            .find(|v| v.name == view)
            .ok_or_else(|| LabError::input(format!("stage {stage} has no view `{view}`")))?;
        let spec = v.chart.ok_or_else(|| LabError::input(format!("the view {stage}/{view} has no chart")))?;
        for (label, part) in crate::frame::groups(&self.df()?, v.group_by)? {
            let plot = super::chart::draw(&spec, &part)?;
            super::display::show_chart(
                &plot,
                Some(&super::svg::draw_svg(&spec, &part)?),
                &format!("{stage}-{view}-{label}"),
            );
        }
        Ok(())
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.df() {
            Ok(df) => df.fmt(f),
            Err(e) => write!(f, "{e}"),
        }
    }
}
