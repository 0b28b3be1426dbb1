//! How long each stage took in the committed runs (data/results/) on the same GPU, model and card:
//! what a run says before it starts, so a lab session knows what it is in for.

use super::run_folder::{run_folders, Manifest, RunFolder, StageStatus};
use std::path::{Path, PathBuf};

/// One stage's duration in the newest committed run that matches.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    pub stage: String,
    pub seconds: f64,
    /// The run ran the stage with the config this run will use (else with other flags).
    pub same_config: bool,
    pub from: PathBuf,
}

/// For each `(stage, config)`, the newest committed run under `results` made on the GPU, model and
/// card of `this`, that finished the stage: with the same config when there is one. `None` where
/// no run matches.
pub fn expected(results: &Path, this: &Manifest, stages: &[(String, serde_json::Value)]) -> Vec<Option<Expected>> {
    // data/results/<gpu>/<call>/<run>, and a run inside a call's folder one deeper.
    let mut runs: Vec<RunFolder> = run_folders(results, 4).iter().filter_map(|d| RunFolder::open(d).ok()).collect();
    runs.retain(|r| {
        r.manifest.env.gpu == this.env.gpu
            && r.manifest.model == this.model
            && r.manifest.card_name() == this.card_name()
    });
    runs.sort_by(|a, b| b.manifest.started.cmp(&a.manifest.started));
    stages
        .iter()
        .map(|(name, config)| {
            let newest = |same: bool| {
                runs.iter().find_map(|r| {
                    r.manifest
                        .stages
                        .iter()
                        .find(|s| s.name == *name && s.status == StageStatus::Done && (!same || s.config == *config))
                        .map(|s| (r, s))
                })
            };
            let ((run, rec), same) = newest(true).map(|x| (x, true)).or_else(|| newest(false).map(|x| (x, false)))?;
            Some(Expected { stage: name.clone(), seconds: rec.seconds, same_config: same, from: run.dir.clone() })
        })
        .collect()
}

/// The time left when the stages in `left` are still to run, from the committed runs' times.
pub fn time_left(left: &[Option<f64>]) -> String {
    let known: Vec<f64> = left.iter().flatten().copied().collect();
    match (known.len(), left.len()) {
        (_, 0) => "done".into(),
        (0, _) => "time left unknown (no committed run of these stages here)".into(),
        (k, n) => {
            let s: f64 = known.iter().sum();
            let rest = if k < n { format!(" and {} stage(s) not timed before", n - k) } else { String::new() };
            format!("about {} left{rest}", minutes(s))
        }
    }
}

fn minutes(s: f64) -> String {
    if s >= 90.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{s:.0} s")
    }
}

/// The line a run prints before it starts: each stage's expected time and the total.
pub fn describe(
    found: &[Option<Expected>],
    stages: &[(String, serde_json::Value)],
    gpu: Option<&str>,
) -> Option<String> {
    if found.iter().all(Option::is_none) {
        return None;
    }
    let mut parts = Vec::new();
    let mut total = 0.0;
    for ((name, _), e) in stages.iter().zip(found) {
        match e {
            Some(e) => {
                total += e.seconds;
                parts.push(format!("{name} {}{}", fmt_s(e.seconds), if e.same_config { "" } else { " (other flags)" }));
            }
            None => parts.push(format!("{name} ?")),
        }
    }
    Some(format!(
        "expected, from the committed runs on {}: {} — about {} in all",
        gpu.unwrap_or("this CPU"),
        parts.join(", "),
        fmt_s(total)
    ))
}

fn fmt_s(s: f64) -> String {
    if s >= 90.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{s:.0} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_sums_the_stages_still_to_run() {
        assert_eq!(time_left(&[Some(40.0), Some(200.0)]), "about 4 min left");
        assert_eq!(time_left(&[Some(20.0), None]), "about 20 s left and 1 stage(s) not timed before");
        assert_eq!(time_left(&[None]), "time left unknown (no committed run of these stages here)");
        assert_eq!(time_left(&[]), "done");
    }
    use crate::session::env::Env;
    use crate::session::run_folder::{RunStatus, StageRecord};
    use std::collections::BTreeMap;

    fn manifest(started: &str, gpu: Option<&str>, stages: &[(&str, f64, serde_json::Value)]) -> Manifest {
        Manifest {
            status: RunStatus::Complete,
            command: "vram-lab run".into(),
            started: started.into(),
            finished: None,
            model: "synthetic:qwen2.5-7b".into(),
            card: Some(crate::hw::Card::parse("rtx4090").unwrap()),
            allocator: Default::default(),
            env: Env { gpu: gpu.map(String::from), ..Default::default() },
            stages: stages
                .iter()
                .map(|(n, s, c)| StageRecord {
                    name: n.to_string(),
                    title: String::new(),
                    config: c.clone(),
                    status: StageStatus::Done,
                    error: None,
                    seconds: *s,
                    tables: BTreeMap::new(),
                    texts: BTreeMap::new(),
                    findings: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_newest_matching_run_times_each_stage() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, m: &Manifest| {
            std::fs::create_dir_all(dir.path().join(name)).unwrap();
            std::fs::write(
                dir.path().join(name).join(super::super::run_folder::MANIFEST),
                serde_json::to_string(m).unwrap(),
            )
            .unwrap();
        };
        let default = serde_json::json!({"precisions": ["bf16"]});
        let other = serde_json::json!({"precisions": ["q4_k_m"]});
        write(
            "a/old",
            &manifest(
                "2026-11-20T10:00:00Z",
                Some("H200"),
                &[("anatomy", 50.0, default.clone()), ("kv", 400.0, default.clone())],
            ),
        );
        write(
            "b/new",
            &manifest(
                "2026-11-22T10:00:00Z",
                Some("H200"),
                &[("anatomy", 55.0, default.clone()), ("kv", 120.0, other)],
            ),
        );
        write("c/h100", &manifest("2026-11-23T10:00:00Z", Some("H100"), &[("anatomy", 70.0, default.clone())]));
        let this = manifest("2026-11-24T10:00:00Z", Some("H200"), &[]);
        let stages = vec![
            ("anatomy".to_string(), default.clone()),
            ("kv".to_string(), default.clone()),
            ("frag".to_string(), default),
        ];
        let e = expected(dir.path(), &this, &stages);
        assert_eq!(e[0].as_ref().map(|e| (e.seconds, e.same_config)), Some((55.0, true)), "the newest run on this GPU");
        assert_eq!(
            e[1].as_ref().map(|e| (e.seconds, e.same_config)),
            Some((400.0, true)),
            "the newest with the same config before a newer one with other flags"
        );
        assert!(e[2].is_none());
        let line = describe(&e, &stages, Some("H200")).unwrap();
        assert!(
            line.contains("anatomy 55 s")
                && line.contains("kv 6.7 min")
                && line.contains("frag ?")
                && line.contains("7.6 min in all"),
            "{line}"
        );
        let cpu = manifest("2026-11-24T10:00:00Z", None, &[]);
        assert!(
            describe(&expected(dir.path(), &cpu, &stages), &stages, None).is_none(),
            "no committed CPU run: nothing to say"
        );
    }
}
