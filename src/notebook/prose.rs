//! A notebook's interpretation as a template filled from the run it describes, so its text cannot
//! quote a figure its outputs do not show (issue 41: prose written for one run sat beside the
//! outputs of another, 24,064 tokens in the text and 16,128 in the table).
//!
//! A field is `{table.column[key=value, key=value]}`: the value the stage's table holds in that
//! column on the rows whose columns have those values (one value, or the field is refused),
//! optionally `:N` for N decimals; `findings` names the stage's findings. `{gpu}`, `{card}`, `{model}`,
//! `{date}` and `{device}` come from the run's manifest. `{{` and `}}` are literal braces.
//!
//! A field no row answers is an error in a committed or computed run (a stale key under a table that
//! has the numbers), and shows as missing only in a run the notebook made Live. What only some
//! runs hold (PyTorch's rows come with the reference script's output) is a section:
//! `{#if table[key=value]}…{#else}…{#end}` keeps the first part when a row has those values, else
//! the second, which says in words what the comparison needs.

use super::stage_run::StageRun;
use crate::error::{LabError, Result};
use polars::prelude::*;

/// What a field shows when this run has no such row (a Live CPU run has no PyTorch rows).
pub const MISSING: &str = "（本次运行没有 / not in this run）";

impl StageRun {
    /// The template with every field filled from this run.
    pub fn fill(&self, template: &str) -> Result<String> {
        // Each table is read once for the whole template, not once a field.
        let mut tables = Tables::new();
        let template = self.sections(template, &mut tables)?;
        let mut out = String::with_capacity(template.len());
        let mut rest = template.as_str();
        while let Some(i) = rest.find(['{', '}']) {
            out.push_str(&rest[..i]);
            let c = rest.as_bytes()[i];
            if rest[i + 1..].starts_with(c as char) {
                out.push(c as char);
                rest = &rest[i + 2..];
                continue;
            }
            if c == b'}' {
                return Err(LabError::input(format!("a lone `}}` in the template near `{}`", head(&rest[i..]))));
            }
            let end = rest[i..]
                .find('}')
                .ok_or_else(|| LabError::input(format!("an unclosed `{{` near `{}`", head(&rest[i..]))))?;
            out.push_str(&self.field(rest[i + 1..i + end].trim(), &mut tables)?);
            rest = &rest[i + end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The template with each `{#if …}…{#else}…{#end}` section replaced by the part this run keeps.
    fn sections(&self, template: &str, tables: &mut Tables) -> Result<String> {
        let mut out = String::with_capacity(template.len());
        let mut rest = template;
        while let Some(i) = rest.find("{#if ") {
            out.push_str(&rest[..i]);
            let cond_end = i + rest[i..].find('}').ok_or_else(|| unclosed(&rest[i..]))?;
            let body = &rest[cond_end + 1..];
            let end = body.find("{#end}").ok_or_else(|| unclosed(&rest[i..]))?;
            let (yes, no) = body[..end].split_once("{#else}").unwrap_or((&body[..end], ""));
            if yes.contains("{#if ") || no.contains("{#if ") || no.contains("{#else}") {
                return Err(LabError::input(format!("a section inside a section near `{}`", head(&rest[i..]))));
            }
            let starts_line = out.is_empty() || out.ends_with('\n');
            out.push_str(if self.has_rows(rest[i + 5..cond_end].trim(), tables)? { yes } else { no });
            rest = &body[end + "{#end}".len()..];
            // A section that starts a line takes the line's end with it: a table's row kept or
            // left out leaves no blank line, which would end the table.
            if starts_line {
                rest = rest.strip_prefix('\n').unwrap_or(rest);
            }
        }
        if let Some(i) = rest.find("{#") {
            return Err(LabError::input(format!("a section mark outside a section near `{}`", head(&rest[i..]))));
        }
        out.push_str(rest);
        Ok(out)
    }

    /// Whether a row of `table[filters]` has those values (a table the run lacks has none).
    fn has_rows(&self, spec: &str, tables: &mut Tables) -> Result<bool> {
        let (table, filters) = match spec.split_once('[') {
            Some((t, f)) => (t.trim(), f.strip_suffix(']').ok_or_else(|| bad(spec, "a `[` without its `]`"))?),
            None => (spec, ""),
        };
        Ok(self.rows(spec, table, filters, tables)?.is_some_and(|(_, rows)| !rows.is_empty()))
    }

    /// The stage's `table` and its rows with the `filters`' values; None when the run has no such
    /// table. A filter naming a column the table lacks is an error (a stale key).
    fn rows(
        &self,
        spec: &str,
        table: &str,
        filters: &str,
        tables: &mut Tables,
    ) -> Result<Option<(DataFrame, Vec<usize>)>> {
        let recorded =
            table == "findings" || self.run.manifest.stage(&self.stage).is_some_and(|r| r.tables.contains_key(table));
        if !recorded {
            return Ok(None);
        }
        let df = match tables.get(table) {
            Some(df) => df.clone(),
            None => {
                let df =
                    if table == "findings" { self.findings()?.df()? } else { self.run.table(&self.stage, table)? };
                tables.insert(table.to_string(), df.clone());
                df
            }
        };
        let mut mask = BooleanChunked::full("m".into(), true, df.height());
        for f in filter_pairs(filters) {
            let (k, v) = f.split_once('=').ok_or_else(|| bad(spec, &format!("the filter `{f}` is not key=value")))?;
            let c = df.column(k.trim()).map_err(|_| bad(spec, &format!("table {table} has no column {}", k.trim())))?;
            let c = c.cast(&DataType::String)?;
            // An empty value names an empty cell, which a CSV reads back as null.
            let v = v.trim();
            let is: BooleanChunked = c.str()?.iter().map(|x| x == Some(v) || (v.is_empty() && x.is_none())).collect();
            mask = &mask & &is;
        }
        let rows = mask.iter().enumerate().filter(|(_, b)| *b == Some(true)).map(|(i, _)| i).collect();
        Ok(Some((df, rows)))
    }

    /// Shows the filled template: as Markdown in a notebook, as text in a terminal.
    pub fn say(&self, template: &str) -> Result<()> {
        let text = dedent(&self.fill(template)?);
        let text = text.trim();
        if crate::report::display::in_notebook() {
            println!("EVCXR_BEGIN_CONTENT text/markdown\n{text}\nEVCXR_END_CONTENT");
        } else {
            println!("{text}");
        }
        Ok(())
    }

    fn field(&self, spec: &str, tables: &mut Tables) -> Result<String> {
        let m = &self.run.manifest;
        match spec {
            "gpu" => return Ok(m.env.gpu.clone().unwrap_or_else(|| m.env.device.clone())),
            "device" => return Ok(m.env.device.clone()),
            "card" => return Ok(m.card_name().to_string()),
            "model" => return Ok(m.model.clone()),
            "date" => return Ok(m.started.get(..10).unwrap_or(&m.started).to_string()),
            _ => {}
        }
        let (spec, decimals) = match spec.rsplit_once(':') {
            Some((s, d)) if !d.contains(']') => {
                (s, Some(d.trim().parse::<usize>().map_err(|_| bad(spec, "`:N` wants a number of decimals"))?))
            }
            _ => (spec, None),
        };
        let (path, filters) = match spec.split_once('[') {
            Some((p, f)) => (p, f.strip_suffix(']').ok_or_else(|| bad(spec, "a `[` without its `]`"))?),
            None => (spec, ""),
        };
        let (table, column) =
            path.trim().split_once('.').ok_or_else(|| bad(spec, "not `table.column[filters]` nor a manifest field"))?;
        let (table, column) = (table.trim(), column.trim());
        let found = self.rows(spec, table, filters, tables)?;
        let (df, rows) = match found {
            Some((df, rows)) if !rows.is_empty() => (df, rows),
            _ if self.live => return Ok(MISSING.into()),
            None => return Err(bad(spec, &format!("stage {} of this run has no table {table}", self.stage))),
            Some(_) => {
                return Err(bad(spec, &format!("no row of {table} has these values (a stale key?); a section `{{#if {table}[…]}}` holds what only some runs have")))
            }
        };
        let col = df.column(column).map_err(|_| bad(spec, &format!("table {table} has no column {column}")))?;
        // Several rows may match when they all hold the one value asked for (a rank's card on
        // each of its item rows); different values are an ambiguous field.
        let values: Vec<String> = rows.iter().map(|r| Ok(show(col.get(*r)?, decimals))).collect::<Result<_>>()?;
        // `rows` is not empty here.
        let first = values[0].clone();
        if values.iter().all(|x| *x == first) {
            Ok(first)
        } else {
            Err(bad(spec, &format!("{} rows with different values match: name more columns", rows.len())))
        }
    }
}

/// `a=x, b=y, z` → ["a=x", "b=y, z"]: a piece without `=` belongs to the value before it (a
/// finding's name or an OOM's context holds commas).
fn filter_pairs(filters: &str) -> Vec<String> {
    let mut pairs: Vec<String> = Vec::new();
    for piece in filters.split(',') {
        match pairs.last_mut() {
            Some(last) if !piece.contains('=') => {
                last.push(',');
                last.push_str(piece);
            }
            _ => pairs.push(piece.to_string()),
        }
    }
    pairs.into_iter().map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect()
}

/// The template's lines without the indentation they share (a cell's raw string may be indented).
fn dedent(text: &str) -> String {
    let indent =
        text.lines().filter(|l| !l.trim().is_empty()).map(|l| l.len() - l.trim_start().len()).min().unwrap_or(0);
    text.lines().map(|l| l.get(indent..).unwrap_or(l.trim_start())).collect::<Vec<_>>().join("\n")
}

/// The tables one template has read, by name (a DataFrame's clone shares its columns).
type Tables = std::collections::HashMap<String, DataFrame>;

fn unclosed(at: &str) -> LabError {
    LabError::input(format!("a section without its `{{#end}}` near `{}`", head(at)))
}

fn bad(spec: &str, why: &str) -> LabError {
    LabError::input(format!("template field `{{{spec}}}`: {why}"))
}

fn head(s: &str) -> &str {
    s.char_indices().nth(40).map(|(i, _)| &s[..i]).unwrap_or(s)
}

/// A value as the prose quotes it: thousands grouped, decimals as asked (integral values none).
fn show(v: AnyValue, decimals: Option<usize>) -> String {
    if let Some(s) = v.get_str() {
        return if s.is_empty() { MISSING.into() } else { s.to_string() };
    }
    if let AnyValue::Boolean(b) = v {
        return b.to_string();
    }
    match v.extract::<f64>() {
        Some(x) if x.is_finite() => {
            let d = decimals.unwrap_or(if x.fract() == 0.0 {
                0
            } else if x.abs() >= 100.0 {
                1
            } else {
                2
            });
            grouped(&format!("{x:.d$}"))
        }
        Some(x) => x.to_string(),
        None if v.is_null() => MISSING.into(),
        None => v.to_string(),
    }
}

/// "24064.5" → "24,064.5".
fn grouped(s: &str) -> String {
    let (sign, s) = s.strip_prefix('-').map(|s| ("-", s)).unwrap_or(("", s));
    let (int, frac) = s.split_once('.').map(|(i, f)| (i, format!(".{f}"))).unwrap_or((s, String::new()));
    let mut out = String::new();
    for (i, ch) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    format!("{sign}{out}{frac}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_prose_quotes_them() {
        assert_eq!(grouped("24064"), "24,064");
        assert_eq!(grouped("-1234567.25"), "-1,234,567.25");
        assert_eq!(grouped("999"), "999");
        assert_eq!(show(AnyValue::Int64(24064), None), "24,064");
        assert_eq!(show(AnyValue::Float64(4658.04), None), "4,658.0");
        assert_eq!(show(AnyValue::Float64(0.7123), Some(2)), "0.71");
        assert_eq!(show(AnyValue::Null, None), MISSING);
        assert_eq!(show(AnyValue::Boolean(true), None), "true");
        assert_eq!(filter_pairs("a=x, b=y, z (w), c=1"), ["a=x", "b=y, z (w)", "c=1"]);
        assert_eq!(dedent("    a\n      b\n\n    c"), "a\n  b\n\nc");
    }

    /// Fields from a committed run: a table row, a manifest field, a missing row, authoring errors.
    #[test]
    fn a_template_fills_from_the_run() {
        use crate::notebook::{Mode, Setup};
        let kv = Setup::new(Mode::Replay, "synthetic:qwen2.5-7b", Some("rtx4090")).stage("kv").unwrap();
        let df = kv.run.table("kv", "kv_limit").unwrap();
        let want = df.column("max_context").unwrap().get(0).unwrap();
        let p =
            df.column("precision").unwrap().cast(&DataType::String).unwrap().str().unwrap().get(0).unwrap().to_string();
        let l =
            df.column("logits").unwrap().cast(&DataType::String).unwrap().str().unwrap().get(0).unwrap().to_string();
        let a =
            df.column("attention").unwrap().cast(&DataType::String).unwrap().str().unwrap().get(0).unwrap().to_string();
        let text = kv
            .fill(&format!(
                "limit {{kv_limit.max_context[precision={p}, logits={l}, attention={a}]}} on {{gpu}} {{{{x}}}}"
            ))
            .unwrap();
        assert_eq!(text, format!("limit {} on {} {{x}}", show(want, None), kv.run.manifest.env.gpu.clone().unwrap()));
        // A committed run answers every field or the template is wrong; a Live run may lack rows.
        let stale = kv.fill("{kv_limit.max_context[precision=f64]}").unwrap_err().to_string();
        assert!(stale.contains("stale key"), "{stale}");
        assert!(kv.fill("{kv_nope.max_context}").unwrap_err().to_string().contains("no table kv_nope"));
        let live = StageRun { live: true, ..kv.clone() };
        assert_eq!(
            live.fill("{kv_limit.max_context[precision=f64]} {kv_nope.x}").unwrap(),
            format!("{MISSING} {MISSING}")
        );
        assert!(kv.fill("{kv_limit.max_context}").unwrap_err().to_string().contains("different values match"));
        assert!(kv.fill("{kv_limit.nope[precision=bf16]}").unwrap_err().to_string().contains("no column nope"));
        assert!(kv.fill("{gpu").is_err() && kv.fill("a } b").is_err() && kv.fill("{kv_limit.max_context:x}").is_err());
    }

    /// A section keeps its first part when a row has the values, else its second.
    #[test]
    fn sections_keep_what_the_run_has() {
        use crate::notebook::{Mode, Setup};
        let kv = Setup::new(Mode::Replay, "synthetic:qwen2.5-7b", Some("rtx4090")).stage("kv").unwrap();
        let t = "a {#if kv_limit[precision=bf16]}has {kv_limit.precision[precision=bf16]}{#else}lacks{#end} b";
        assert_eq!(kv.fill(t).unwrap(), "a has bf16 b");
        let t = "{#if kv_limit[precision=f64]}{kv_limit.max_context[precision=f64]}{#else}needs an f64 run{#end}";
        assert_eq!(kv.fill(t).unwrap(), "needs an f64 run");
        assert_eq!(kv.fill("{#if kv_nope}x{#end}.").unwrap(), ".");
        // Rows of a table, each kept or left out whole.
        let rows = "|a|\n{#if kv_limit[precision=bf16]}|b|\n{#end}\n{#if kv_nope}|c|\n{#end}\n|d|";
        assert_eq!(kv.fill(rows).unwrap(), "|a|\n|b|\n|d|");
        for broken in
            ["{#if kv_limit}x", "{#if kv_limit}{#if kv_limit}x{#end}{#end}", "x{#end}", "{#if kv_limit[nope=1]}x{#end}"]
        {
            assert!(kv.fill(broken).is_err(), "{broken}");
        }
    }
}
