//! A run folder's stage as one JSON document (`estimate --json`, `plan --json`): what a program
//! reads instead of the console's tables. Built from the folder as written, so it says exactly
//! what the CSVs say. Its shape (`SCHEMA`) is documented in docs/commands.md and held by a test.

use crate::error::Result;
use crate::session::run_folder::RunFolder;
use polars::prelude::{AnyValue, DataFrame};
use serde_json::{json, Map, Value};

/// The document's name and version: a field renamed or removed is a new version.
pub const SCHEMA: &str = "vram-lab.stage/1";

/// `stage` of `run`: the run's model and card, the stage's config, each table as rows of
/// column → value, each text, and the findings.
pub fn document(run: &RunFolder, stage: &str) -> Result<Value> {
    let rec = run.record(stage)?;
    let mut tables = Map::new();
    for name in rec.tables.keys() {
        tables.insert(name.clone(), rows(&run.table(stage, name)?));
    }
    let mut texts = Map::new();
    for name in rec.texts.keys() {
        if let Some(t) = run.text(stage, name)? {
            texts.insert(name.clone(), Value::String(t));
        }
    }
    let m = &run.manifest;
    Ok(json!({
        "schema": SCHEMA,
        "command": m.command,
        "model": m.model,
        "card": m.card,
        "started": m.started,
        "run_folder": run.dir,
        "stage": rec.name,
        "status": rec.status,
        "error": rec.error,
        "config": rec.config,
        "tables": tables,
        "texts": texts,
        "findings": rec.findings,
    }))
}

/// A table as rows of column → value (numbers as numbers, an empty cell as null).
fn rows(df: &DataFrame) -> Value {
    let columns = df.columns();
    let rows = (0..df.height())
        .map(|i| {
            let row: Map<String, Value> =
                columns.iter().map(|c| (c.name().to_string(), c.get(i).map(value).unwrap_or(Value::Null))).collect();
            Value::Object(row)
        })
        .collect();
    Value::Array(rows)
}

fn value(v: AnyValue) -> Value {
    match v {
        AnyValue::Null => Value::Null,
        AnyValue::Boolean(b) => Value::Bool(b),
        AnyValue::String(s) => Value::String(s.to_string()),
        AnyValue::StringOwned(s) => Value::String(s.to_string()),
        AnyValue::Int8(x) => json!(x),
        AnyValue::Int16(x) => json!(x),
        AnyValue::Int32(x) => json!(x),
        AnyValue::Int64(x) => json!(x),
        AnyValue::UInt8(x) => json!(x),
        AnyValue::UInt16(x) => json!(x),
        AnyValue::UInt32(x) => json!(x),
        AnyValue::UInt64(x) => json!(x),
        // NaN and the infinities have no JSON number: null, as an empty cell.
        AnyValue::Float32(x) => serde_json::Number::from_f64(x as f64).map_or(Value::Null, Value::Number),
        AnyValue::Float64(x) => serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number),
        other => Value::String(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polars::prelude::*;

    #[test]
    fn cells_keep_their_types() {
        let df = df!(
            "card" => ["rtx4090", "24GiB"],
            "mib" => [Some(1.5f64), None],
            "fits" => [true, false],
            "layers" => [28i64, 0],
            "bad" => [f64::NAN, 1.0],
        )
        .unwrap();
        let v = rows(&df);
        assert_eq!(v[0], json!({"card": "rtx4090", "mib": 1.5, "fits": true, "layers": 28, "bad": null}));
        assert_eq!(v[1]["mib"], Value::Null);
        assert_eq!(v.as_array().unwrap().len(), 2);
    }
}
