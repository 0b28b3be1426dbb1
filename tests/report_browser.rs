//! report.html in a real browser: headless Chromium loads the page offline and the page's own
//! render check (`#vram-lab-render-check`) must say that every chart was drawn and no script
//! failed. Chromium is Debian's `chromium` package (`.ci/run` installs it); without it the test
//! fails in CI and is skipped elsewhere, saying so.

use std::path::{Path, PathBuf};
use std::process::Command;

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"].iter().find_map(|name| {
        let out = Command::new("sh").arg("-c").arg(format!("command -v {name}")).output().ok()?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (!path.is_empty()).then(|| PathBuf::from(path))
    })
}

/// The DOM after load, as Chromium serialises it.
fn dump_dom(browser: &Path, page: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--virtual-time-budget=10000"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let start = tag.find(&format!("{name}=\""))? + name.len() + 2;
    let end = tag[start..].find('"')? + start;
    Some(tag[start..end].replace("&quot;", "\""))
}

#[test]
fn every_chart_of_the_report_renders_in_chromium() {
    let Some(browser) = chromium() else {
        assert!(std::env::var_os("CI").is_none(), "CI must have Chromium (apt-get install chromium)");
        eprintln!("skipped: no Chromium on this machine (apt-get install chromium)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_vram-lab"))
        .args(["anatomy", "--quiet", "--max-new-tokens", "8", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dom = dump_dom(&browser, &out.join("report.html"));
    let at = dom
        .find("id=\"vram-lab-render-check\"")
        .unwrap_or_else(|| panic!("no render check in:\n{}", &dom[..dom.len().min(2000)]));
    let tag_start = dom[..at].rfind('<').unwrap();
    let tag = &dom[tag_start..tag_start + dom[tag_start..].find('>').unwrap()];
    let want: usize = attr(tag, "data-charts").unwrap().parse().unwrap();
    let got: usize =
        attr(tag, "data-rendered").unwrap_or_else(|| panic!("the check script did not run: {tag}")).parse().unwrap();
    let errors = attr(tag, "data-errors").unwrap();
    assert_eq!(errors, "[]", "script errors in the page");
    assert!(want >= 2, "anatomy declares two charts, the page counted {want}");
    assert_eq!(got, want, "charts drawn");
    assert_eq!(dom.matches("class=\"plot-container plotly\"").count(), want, "one plot element per chart");
}
