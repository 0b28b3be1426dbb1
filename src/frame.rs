//! Polars tables as the lab reads and prints them: columns as vectors, figures rounded by their
//! magnitude, a table split into groups, console text. Knows nothing of stages.

use crate::error::Result;
use polars::prelude::*;

/// Whole tables on the console: every column and row, no shape or dtype lines.
pub fn console_setup() {
    for (k, v) in [
        ("POLARS_FMT_MAX_COLS", "40"),
        ("POLARS_FMT_MAX_ROWS", "80"),
        ("POLARS_FMT_TABLE_HIDE_DATAFRAME_SHAPE_INFORMATION", "1"),
        ("POLARS_FMT_TABLE_HIDE_COLUMN_DATA_TYPES", "1"),
        ("POLARS_TABLE_WIDTH", "250"),
    ] {
        std::env::set_var(k, v);
    }
}

/// Decimals to keep for a figure of magnitude `v`: none from 1000, 2 from 10, 3 from 1, and three
/// significant digits below (a tiny model's GiB).
fn decimals(v: f64) -> i32 {
    let v = v.abs();
    if v >= 1000.0 {
        0
    } else if v >= 10.0 {
        2
    } else if v >= 1.0 || v == 0.0 {
        3
    } else {
        (2 - v.log10().floor() as i32).min(9)
    }
}

/// Float columns rounded for reading, each figure by its own magnitude (a summary mixes GiB,
/// bytes and tokens in one column); the CSVs keep every digit.
pub fn rounded(df: &DataFrame) -> Result<DataFrame> {
    let cols = df
        .columns()
        .iter()
        .map(|c| {
            if !matches!(c.dtype(), DataType::Float64 | DataType::Float32) {
                return Ok(c.clone());
            }
            let f = c.cast(&DataType::Float64)?;
            let out: Float64Chunked = f
                .f64()?
                .iter()
                .map(|v| {
                    v.map(|x| {
                        if x.is_finite() {
                            let s = 10f64.powi(decimals(x));
                            (x * s).round() / s
                        } else {
                            x
                        }
                    })
                })
                .collect();
            Ok(out.with_name(c.name().clone()).into_column())
        })
        .collect::<Result<Vec<Column>>>()?;
    Ok(DataFrame::new_infer_height(cols)?)
}

/// The rows of `df` split by the distinct values of `by`, in order of first appearance, each
/// with a label such as "precision=bf16, logits=all". No `by`: the whole table, no label.
pub fn groups(df: &DataFrame, by: &[&str]) -> Result<Vec<(String, DataFrame)>> {
    let by: Vec<&str> = by.iter().copied().filter(|c| df.column(c).is_ok()).collect();
    if by.is_empty() {
        return Ok(vec![(String::new(), df.clone())]);
    }
    let cols: Vec<Column> =
        by.iter().map(|c| df.column(c).and_then(|c| c.cast(&DataType::String))).collect::<PolarsResult<_>>()?;
    let key = |row: usize| -> String {
        by.iter()
            .zip(&cols)
            .map(|(name, c)| format!("{name}={}", c.str().ok().and_then(|s| s.get(row)).unwrap_or("")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let keys: Vec<String> = (0..df.height()).map(key).collect();
    let mut order: Vec<String> = Vec::new();
    for k in &keys {
        if !order.contains(k) {
            order.push(k.clone());
        }
    }
    order
        .into_iter()
        .map(|k| {
            let mask: BooleanChunked = keys.iter().map(|x| *x == k).collect();
            Ok((k, df.filter(&mask)?))
        })
        .collect()
}

/// The columns of `cols` that the table has, in that order (a replayed older table may lack a
/// newer column).
pub fn present_columns(df: &DataFrame, cols: &[&str]) -> Result<DataFrame> {
    let cols: Vec<&str> = cols.iter().copied().filter(|c| df.column(c).is_ok()).collect();
    Ok(df.select(cols)?)
}

/// A titled text table, floats rounded.
pub fn console_columns(df: &DataFrame, caption: &str) -> Result<String> {
    Ok(format!("{caption}\n{}", rounded(df)?))
}

/// A table as console text: per group of `group_by`, the caption with the group's label and the
/// columns `cols`.
pub fn console_groups(df: &DataFrame, caption: &str, cols: &[&str], group_by: &[&str]) -> Result<String> {
    let mut out = Vec::new();
    for (label, part) in groups(df, group_by)? {
        let caption = if label.is_empty() { caption.to_string() } else { format!("{caption} [{label}]") };
        out.push(console_columns(&present_columns(&part, cols)?, &caption)?);
    }
    Ok(out.join("\n\n"))
}

/// A column as floats (nulls as NaN).
pub fn floats(df: &DataFrame, col: &str) -> Result<Vec<f64>> {
    let c = df.column(col)?.cast(&DataType::Float64)?;
    Ok(c.f64()?.iter().map(|v| v.unwrap_or(f64::NAN)).collect())
}

/// A column as strings (nulls as empty).
pub fn strings(df: &DataFrame, col: &str) -> Result<Vec<String>> {
    let c = df.column(col)?.cast(&DataType::String)?;
    Ok(c.str()?.iter().map(|v| v.unwrap_or("").to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_groups() {
        let df = df!(
            "p" => ["bf16", "bf16", "q4"],
            "x" => [14.185191, 2.0, 1.0],
            "y" => [1234.567, 1.0, 2.0],
        )
        .unwrap();
        let r = rounded(&df).unwrap();
        assert_eq!(r.column("x").unwrap().f64().unwrap().get(0), Some(14.19));
        assert_eq!(r.column("y").unwrap().f64().unwrap().get(0), Some(1235.0));
        let g = groups(&df, &["p"]).unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].0, "p=bf16");
        assert_eq!(g[0].1.height(), 2);
        assert_eq!(g[1].1.height(), 1);
        assert_eq!(groups(&df, &[]).unwrap().len(), 1);
        let mixed = rounded(&df!("v" => [0.0032591, 14.185191, 57348.2]).unwrap()).unwrap();
        let v: Vec<Option<f64>> = mixed.column("v").unwrap().f64().unwrap().iter().collect();
        assert_eq!(v, vec![Some(0.00326), Some(14.19), Some(57348.0)]);
    }
}
