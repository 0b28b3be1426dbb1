//! `Table`: a stage's table as a notebook holds it. Two evcxr facts shape it: a variable's type
//! must be nameable from the notebook (polars' DataFrame lives in polars-core, which a notebook
//! cannot name), and each cell links its own copy of polars, whose hashers differ from cell to
//! cell, so a DataFrame whose schema one cell cached cannot find its columns in the next. A Table
//! therefore keeps the columns and builds a fresh DataFrame for every use.

use crate::error::Result;
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
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.df() {
            Ok(df) => df.fmt(f),
            Err(e) => write!(f, "{e}"),
        }
    }
}
