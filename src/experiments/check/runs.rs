//! The committed runs read back: every KV sweep's folder, its attempts in the order the process
//! ran them, and its bisections' limits.

use crate::error::{LabError, Result};
use crate::estimate::fit::{Inference, Runtime};
use crate::estimate::sweep;
use crate::frame::{floats, strings};
use crate::hw::Card;
use crate::memory::policy::Allocator;
use crate::model::layers::attention::AttentionMode;
use crate::model::{DecoderConfig, Logits, Precision};
use crate::session::run_folder::{read_csv, MANIFEST};
use std::path::{Path, PathBuf};

/// An env.json or manifest.json is a few kilobytes; a results folder is not trusted to hold only those.
const MAX_CONTEXT_FILE: u64 = 16 << 20;

/// Every CSV called `name` under `dir`, sorted (regular files only, no link followed).
pub fn find(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
    out.extend(crate::paths::walk_files(dir, |p| p.file_name().is_some_and(|f| f == name)));
}

/// The run's model and card: env.json beside the CSV (one stage per folder) or manifest.json
/// in the folder above (a `run` with a folder per stage). The model is a synthetic preset's
/// config, or None for a model file (a GGUF), which is not committed beside its run.
pub fn run_context(csv: &Path) -> Result<(Option<DecoderConfig>, Option<String>)> {
    for dir in csv.ancestors().skip(1).take(2) {
        for name in ["env.json", "manifest.json"] {
            let Ok(text) = crate::paths::read_own_text(&dir.join(name), MAX_CONTEXT_FILE) else { continue };
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| LabError::input(format!("{}: {e}", dir.join(name).display())))?;
            let Some(model) = v.get("model").and_then(|m| m.as_str()) else { continue };
            let preset = model.strip_prefix("synthetic:");
            let card = match v.get("card") {
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(obj) => obj.get("name").and_then(|n| n.as_str()).map(String::from),
                None => None,
            };
            return Ok((preset.map(DecoderConfig::preset).transpose()?, card));
        }
    }
    Err(LabError::input(format!("{}: no env.json or manifest.json names its model", csv.display())))
}

fn logits(s: &str) -> Result<Logits> {
    <Logits as clap::ValueEnum>::from_str(s, true)
        .map_err(|_| LabError::input(format!("unknown logits `{s}` in a results file")))
}

/// The logits a folder's steps kept when its CSV has no column for it (runs before it had one):
/// the `--logits` of the command in env.json, else its kv_limit.csv; the batch sweep keeps all.
fn folder_logits(csv: &Path) -> Result<Option<Logits>> {
    if csv.file_name().is_some_and(|f| f == "kv_batch.csv") {
        return Ok(Some(Logits::All));
    }
    if let Ok(text) = std::fs::read_to_string(csv.with_file_name("env.json")) {
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| LabError::input(format!("{}: {e}", csv.display())))?;
        let command = v.get("command").and_then(|c| c.as_str()).unwrap_or("");
        let mut words = command.split_whitespace().skip_while(|w| *w != "--logits").skip(1);
        if let Some(w) = words.next() {
            return logits(w).map(Some);
        }
    }
    let limit = csv.with_file_name("kv_limit.csv");
    if !limit.is_file() {
        return Ok(Some(Logits::All));
    }
    let df = read_csv(&limit)?;
    strings(&df, "logits")?.first().map(|s| logits(s)).transpose()
}

/// The allocator a KV folder's process ran under, from its run's manifest (`--allocator`;
/// the pool where the manifest predates the flag or is not there).
fn folder_allocator(csv: &Path) -> Result<Allocator> {
    let Some(manifest) = csv.parent().and_then(Path::parent).map(|run| run.join(MANIFEST)) else {
        return Ok(Allocator::Pool);
    };
    let Ok(text) = std::fs::read_to_string(&manifest) else { return Ok(Allocator::Pool) };
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| LabError::input(format!("{}: {e}", manifest.display())))?;
    match v.get("allocator") {
        None => Ok(Allocator::Pool),
        Some(a) => serde_json::from_value(a.clone())
            .map_err(|e| LabError::input(format!("{}: allocator {a}: {e}", manifest.display()))),
    }
}

pub fn relative(p: &Path, root: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// One prefill a KV folder's process ran, as its CSV row records it.
#[derive(Clone)]
pub struct Attempt {
    pub file: String,
    pub w: Inference,
    pub ok: bool,
    /// base + held, peak, transient (MiB), for the steps that fitted.
    pub measured: (f64, f64, f64),
    /// A mixture's busiest expert's tokens, where the run recorded them.
    pub routed: Option<u64>,
}

/// A bisection's row of kv_limit.csv, with the sweep it closed.
pub struct SweepLimit {
    /// Where in the folder's `attempts` the sweep starts.
    pub first: usize,
    /// The sweep's doubling lengths, up to the first that failed.
    pub doubling: Vec<usize>,
    pub resolution: usize,
    pub max_context: usize,
    pub retried: bool,
}

/// A folder's sweeps: its attempts in the order the process ran them, the tokens the quantized
/// buffer was sized for before each, and the bisections' limits.
pub struct Folder {
    pub cfg: DecoderConfig,
    pub card: Option<Card>,
    pub attempts: Vec<Attempt>,
    pub seen: Vec<u64>,
    pub limit_file: String,
    pub limits: Vec<SweepLimit>,
}

/// The runs under `root` that hold a KV sweep (kv_prefill.csv or kv_batch.csv).
pub fn kv_folders(root: &Path) -> Result<Vec<Folder>> {
    let mut files = Vec::new();
    find(root, "kv_prefill.csv", &mut files);
    find(root, "kv_batch.csv", &mut files);
    let mut dirs: Vec<PathBuf> = files.iter().filter_map(|f| f.parent().map(Path::to_path_buf)).collect();
    dirs.sort();
    dirs.dedup();
    dirs.iter().map(|d| kv_folder(d, root)).collect()
}

/// The rows of one CSV as attempts, grouped by sweep (precision, logits, attention) in the
/// order the groups first appear, each group's rows sorted by (seq, batch).
fn read_attempts(f: &Path, root: &Path) -> Result<Vec<Vec<Attempt>>> {
    let df = read_csv(f)?;
    let n = df.height();
    let (outcome, prec, att) = (strings(&df, "outcome")?, strings(&df, "precision")?, strings(&df, "attention")?);
    let lg: Vec<Option<Logits>> = match strings(&df, "logits") {
        Ok(v) => v.iter().map(|s| logits(s).map(Some)).collect::<Result<_>>()?,
        Err(_) => vec![folder_logits(f)?; n],
    };
    let (seq, batch) = (floats(&df, "seq")?, floats(&df, "batch")?);
    let (base, held, peak, transient) =
        (floats(&df, "base_mib")?, floats(&df, "held_mib")?, floats(&df, "peak_mib")?, floats(&df, "transient_mib")?);
    let routed: Vec<Option<u64>> = match floats(&df, "busiest_expert_tokens") {
        Ok(v) => v.iter().map(|&x| (x.is_finite() && x >= 0.0).then_some(x as u64)).collect(),
        Err(_) => vec![None; n],
    };
    let allocator = folder_allocator(f)?;
    let mut groups: Vec<(String, Vec<Attempt>)> = Vec::new();
    for r in 0..n {
        let Some(logits) = lg[r] else { continue };
        let w = Inference {
            precision: Precision::parse(&prec[r])?,
            seq: seq[r] as usize,
            batch: batch[r] as usize,
            logits,
            attention: AttentionMode::parse(&att[r])?,
            stored: None,
            allocator,
        };
        let key = format!("{}/{}/{}", prec[r], logits.name(), att[r]);
        let a = Attempt {
            file: relative(f, root),
            w,
            ok: outcome[r] == "ok",
            measured: (base[r] + held[r], peak[r], transient[r]),
            routed: routed[r],
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(a),
            None => groups.push((key, vec![a])),
        }
    }
    Ok(groups
        .into_iter()
        .map(|(_, mut g)| {
            g.sort_by_key(|a| (a.w.seq, a.w.batch));
            g
        })
        .collect())
}

/// A sweep's rows (sorted) in the order the KV stage ran them: the doubling lengths up to the
/// first that failed (the longest row), then the bisection's trials between the last doubling
/// length that fitted and it. Returns the order and the doubling lengths.
fn run_order(rows: &[Attempt], resolution: usize) -> (Vec<usize>, Vec<usize>) {
    let ascending: Vec<usize> = (0..rows.len()).collect();
    let Some(top) = rows.len().checked_sub(1).filter(|&t| !rows[t].ok) else { return (ascending, vec![]) };
    let outcome = |seq: u64| rows.iter().position(|a| a.w.seq as u64 == seq);
    // The bisection's lower bound: the shortest fitted length whose search tries exactly the rows
    // between it and the longest.
    for lo in (0..top).filter(|&i| rows[i].ok) {
        let between: Vec<usize> = (lo + 1..top).collect();
        let mut tried = Vec::new();
        let found = crate::search::bisect(rows[lo].w.seq as u64, rows[top].w.seq as u64, resolution as u64, |n| {
            let i = outcome(n).ok_or_else(|| LabError::other("not a row"))?;
            tried.push(i);
            Ok(rows[i].ok)
        });
        let mut sorted = tried.clone();
        sorted.sort();
        if found.is_ok() && sorted == between {
            let doubling: Vec<usize> = (0..=lo).chain([top]).collect();
            let lengths = doubling.iter().map(|&i| rows[i].w.seq).collect();
            return (doubling.into_iter().chain(tried).collect(), lengths);
        }
    }
    (ascending, rows.iter().map(|a| a.w.seq).collect())
}

/// One KV folder: its sweeps in the order the KV stage runs them (per precision: the prefill
/// sweeps, then the batch sweep), each with its bisection.
fn kv_folder(dir: &Path, root: &Path) -> Result<Folder> {
    let any = ["kv_prefill.csv", "kv_batch.csv"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
        .ok_or_else(|| LabError::other("no KV CSV"))?;
    let (cfg, card) = run_context(&any)?;
    let cfg = cfg.ok_or_else(|| {
        LabError::input(format!(
            "{}: the KV runs of a model file are not checked (its config is not committed)",
            any.display()
        ))
    })?;
    let card = card.and_then(|c| Card::parse(&c).ok());
    let capacity = card.as_ref().map(|c| c.total_bytes()).unwrap_or(u64::MAX);
    let prefill =
        if dir.join("kv_prefill.csv").is_file() { read_attempts(&dir.join("kv_prefill.csv"), root)? } else { vec![] };
    let batch =
        if dir.join("kv_batch.csv").is_file() { read_attempts(&dir.join("kv_batch.csv"), root)? } else { vec![] };
    let limit_file = dir.join("kv_limit.csv");
    // (precision, logits, attention, batch) → (resolution, measured longest, retried)
    type LimitKey = (String, String, String, usize);
    let mut limit_rows: Vec<(LimitKey, (usize, usize, bool))> = Vec::new();
    if limit_file.is_file() {
        let df = read_csv(&limit_file)?;
        let (prec, lg, batch, max, res) = (
            strings(&df, "precision")?,
            strings(&df, "logits")?,
            floats(&df, "batch")?,
            floats(&df, "max_context")?,
            floats(&df, "resolution")?,
        );
        // Older folders ran one attention each, named in their prefill sweep.
        let att = match strings(&df, "attention") {
            Ok(v) => v,
            Err(_) => {
                vec![prefill.first().map(|g| g[0].w.attention.name().to_string()).unwrap_or_default(); df.height()]
            }
        };
        // Runs before the allocation hook retried a failed request after a trim have no column.
        let retry = match strings(&df, "oom_retry") {
            Ok(v) => v.iter().map(|s| s == "true").collect(),
            Err(_) => vec![false; df.height()],
        };
        for r in 0..df.height() {
            limit_rows.push((
                (prec[r].clone(), lg[r].clone(), att[r].clone(), batch[r] as usize),
                (res[r] as usize, max[r] as usize, retry[r]),
            ));
        }
    }
    let mut precisions: Vec<Precision> = Vec::new();
    for p in prefill.iter().chain(&batch).map(|g| g[0].w.precision) {
        if !precisions.contains(&p) {
            precisions.push(p);
        }
    }
    let mut attempts = Vec::new();
    let mut limits = Vec::new();
    for p in precisions {
        for group in prefill.iter().filter(|g| g[0].w.precision == p) {
            let w = group[0].w;
            let key = (p.name().to_string(), w.logits.name().to_string(), w.attention.name().to_string(), w.batch);
            let limit = limit_rows.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
            let (order, doubling) = run_order(group, limit.map(|l| l.0).unwrap_or(1));
            if let Some((resolution, max_context, retried)) = limit {
                limits.push(SweepLimit { first: attempts.len(), doubling, resolution, max_context, retried });
            }
            attempts.extend(order.into_iter().map(|i| group[i].clone()));
        }
        for group in batch.iter().filter(|g| g[0].w.precision == p) {
            attempts.extend(group.iter().cloned());
        }
    }
    let order: Vec<(Inference, bool)> = attempts.iter().map(|a| (a.w, a.ok)).collect();
    let seen = sweep::seen_before(&cfg, Runtime::assumed().bytes(), capacity, &order, 0);
    Ok(Folder { cfg, card, attempts, seen, limit_file: relative(&limit_file, root), limits })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A KV folder's allocator comes from its run's manifest: the pool when the field or the
    /// manifest is absent (runs before the flag), a value the lab does not know refused by name.
    #[test]
    fn folder_allocator_reads_the_manifest() {
        let tmp = tempfile::tempdir().unwrap();
        let csv = tmp.path().join("kv").join("kv_prefill.csv");
        assert_eq!(folder_allocator(&csv).unwrap(), Allocator::Pool);
        let write = |v: &str| std::fs::write(tmp.path().join(MANIFEST), v).unwrap();
        write(r#"{"command": "vram-lab kv"}"#);
        assert_eq!(folder_allocator(&csv).unwrap(), Allocator::Pool);
        write(r#"{"allocator": "pages"}"#);
        assert_eq!(folder_allocator(&csv).unwrap(), Allocator::Pages);
        write(r#"{"allocator": "slab"}"#);
        let e = folder_allocator(&csv).unwrap_err().to_string();
        assert!(e.contains("allocator \"slab\""), "{e}");
    }
}
