//! Hostile input, tried as a user and as an attacker would: flags, config.json, safetensors, GGUF
//! and tokenizer files, run folders and output paths that are missing, truncated, absurd,
//! inconsistent, links, FIFOs or devices (cases.rs). Every case runs the binary in a scratch
//! folder under a time limit and must exit non-zero without a panic, print one line on stderr
//! (`error: …`, naming what is wrong), change nothing that was there before (the user's files, the
//! targets of links) and create nothing outside the run's `--out` folder (harness.rs).
//!
//! The table of every case (the command, the exit code, the line) is docs/hostile-inputs.md: the
//! test writes target/hostile-inputs.md and fails when the committed table differs; regenerate
//! it with `VRAM_LAB_UPDATE_DOCS=1 cargo test --test hostile`.

mod cases;
#[path = "../common/mod.rs"]
mod common;
mod harness;
#[path = "../common/snapshot.rs"]
mod snapshot;

use cases::{cases, tiny_gguf};
use harness::{case, run, TIME_LIMIT};
use std::path::Path;

fn escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The line as the table keeps it: what depends on this machine (its memory) as N.
fn stable(line: &str) -> String {
    let mut line = line.to_string();
    for (from, to) in [("1 to ", " (half the host"), ("more than the ", " this device has")] {
        if let (Some(a), Some(b)) = (line.find(from), line.find(to)) {
            if a + from.len() <= b {
                line = format!("{}N{}", &line[..a + from.len()], &line[b..]);
            }
        }
    }
    line
}

#[test]
fn hostile_inputs_fail_cleanly() {
    let cases = cases();
    assert!(cases.len() >= 200, "{} cases", cases.len());
    let mut table = String::from(
        "# Hostile inputs\n\nEvery input `tests/hostile/` tries (CPU build, `--quiet --out out` added to each command, run in a scratch folder beside a file of the user's): the exit code and the one line on stderr. None panics, hangs, changes a file that was there before (the user's, or the target of a link) or creates one outside `--out`. The same table comes from the debug and the release build (`VRAM_LAB_BIN=target/release/vram-lab cargo test --test hostile`).\nRegenerate: `VRAM_LAB_UPDATE_DOCS=1 cargo test --test hostile`.\n\n| input | command | exit | stderr |\n|---|---|---|---|\n",
    );
    let mut failures = Vec::new();
    for c in &cases {
        let o = run(c);
        // Control characters shown escaped, and the environment a case sets before its command.
        let env = c.env.iter().map(|(k, v)| format!("{k}={}", v.escape_debug()));
        let cmd = env.chain(c.args.iter().map(|a| a.escape_debug().to_string())).collect::<Vec<_>>().join(" ");
        let lines: Vec<&str> = o.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        let line = lines.first().copied().unwrap_or("");
        let mut bad = Vec::new();
        if o.hung {
            bad.push(format!("still running after {TIME_LIMIT:?}"));
        }
        if o.code == Some(0) || o.code == Some(101) || o.code.is_none() {
            bad.push(format!("exit code {:?}", o.code));
        }
        if o.stderr.contains("panicked") || o.stdout.contains("panicked") {
            bad.push("panicked".into());
        }
        if lines.len() != 1 || !line.starts_with("error: ") {
            bad.push(format!("stderr is not one `error:` line: {:?}", o.stderr));
        }
        if !line.contains(c.expect) {
            bad.push(format!("`{}` not in the line", c.expect));
        }
        if !o.stray.is_empty() {
            bad.push(format!("wrote outside --out: {:?}", o.stray));
        }
        if !o.changed.is_empty() {
            bad.push(format!("changed what was there: {:?}", o.changed));
        }
        if !bad.is_empty() {
            let laid: Vec<&str> = c.entries.iter().map(|(p, _)| p.as_str()).collect();
            failures.push(format!("[{}] {cmd} (with {laid:?}): {}\n  {line}", c.group, bad.join("; ")));
        }
        let code = o.code.map(|c| c.to_string()).unwrap_or_else(|| "killed".into());
        table.push_str(&format!("| {} | `{}` | {code} | {} |\n", c.group, escape(&cmd), escape(&stable(line))));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(root.join("target")).unwrap();
    std::fs::write(root.join("target/hostile-inputs.md"), &table).unwrap();
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
    let doc = root.join("docs/hostile-inputs.md");
    if std::env::var_os("VRAM_LAB_UPDATE_DOCS").is_some() {
        std::fs::write(&doc, &table).unwrap();
    }
    let committed = std::fs::read_to_string(&doc).unwrap_or_default();
    assert!(committed == table, "docs/hostile-inputs.md differs from what the cases print now (target/hostile-inputs.md): regenerate with VRAM_LAB_UPDATE_DOCS=1 cargo test --test hostile");
}

/// A GGUF cut short is named truncated, with its bytes, by `generate` (before any tensor is read)
/// and by `estimate`, which still prices it from its header.
#[test]
fn a_truncated_gguf_is_named_and_still_priced() {
    let gguf = tiny_gguf();
    let cut = gguf.len() * 9 / 10;
    let line = format!("m.gguf: truncated: {cut} of {} bytes", gguf.len());
    let o = run(&case("gguf", "generate --model m.gguf --prompt-ids 1,2", "").file("m.gguf", gguf[..cut].to_vec()));
    assert_eq!(o.code, Some(2));
    assert_eq!(o.stderr.trim(), format!("error: {line}"));
    let o = run(&case("gguf", "estimate --model m.gguf", "").file("m.gguf", gguf[..cut].to_vec()));
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stdout.contains(&format!("{line}: priced from its header")), "{}", o.stdout);
    // The same weights as the whole file's.
    let whole = run(&case("gguf", "estimate --model m.gguf", "").file("m.gguf", gguf.clone()));
    let need = |s: &str| s.lines().find(|l| l.starts_with("q4_k_m: needs")).map(str::to_string);
    assert!(need(&o.stdout).is_some() && need(&o.stdout) == need(&whole.stdout), "{}\n{}", o.stdout, whole.stdout);
}
