//! report.html as a reader meets it, from a fresh run of the estimator check (CSV only: it runs
//! anywhere in a second): the check opens with its summary, not with its hundreds of rows.

use std::process::Command;

#[test]
fn the_check_stage_opens_with_its_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_vram-lab"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["check", "--quiet", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    let check = &page[page.find("<h2 id=\"check\">").expect("the check's section")..];
    let summary = check.find("<h3>Estimator check — the summary").expect("a summary");
    let first_table = check.find("<table").unwrap();
    assert!(summary < first_table, "the summary's caption comes before any table");
    let rows = check.find("Estimator check — allocated and peak").unwrap();
    assert!(summary < rows, "the summary before the rows it sums up");
    // The summary counts and names: every kind of check with its count, those within, the worst.
    let table = &check[summary..summary + check[summary..].find("</table>").unwrap()];
    for col in ["checks", "within_tolerance", "worst_err_pct", "worst_case"] {
        assert!(table.contains(&format!(">{col}</th>")), "{col} in {table}");
    }
    assert!(table.contains("weights after loading") && table.contains("longest context, OOM retried"), "{table}");
    assert!(table.contains("kv_prefill.csv"), "the worst case is named by its file: {table}");
}
