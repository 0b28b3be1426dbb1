//! Every name a Hub server or the user gives is checked here before it becomes a path or a URL:
//! the repo id, the endpoint, the commit and etag headers, and file names (`crate::paths::rel_name`).

use crate::error::{LabError, Result};
use std::path::PathBuf;

/// The longest part of a repo id the Hub allows.
const MAX_REPO_PART: usize = 96;
/// The longest etag the lab takes as a blob name.
const MAX_ETAG: usize = 128;

/// `org/name`: two parts of `[A-Za-z0-9._-]`, neither `.`/`..` nor starting with `.` or `-`.
pub fn repo_id(repo: &str) -> Result<()> {
    let bad = |why: &str| LabError::input(format!("hub: the repo id `{}` {why}", repo.escape_debug()));
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() != 2 {
        return Err(bad("is not org/name"));
    }
    for part in parts {
        if part.is_empty() || part.len() > MAX_REPO_PART {
            return Err(bad(&format!("has a part that is empty or over {MAX_REPO_PART} characters")));
        }
        if part.starts_with('.') || part.starts_with('-') {
            return Err(bad("has a part starting with `.` or `-`"));
        }
        if !part.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
            return Err(bad("holds a character other than letters, digits, `.`, `_` and `-`"));
        }
        // The Hub refuses `--` and `..` in an id (huggingface_hub's validate_repo_id): with `--`,
        // `a--b/c` and `a/b--c` would share the cache folder models--a--b--c.
        if part.contains("--") || part.contains("..") {
            return Err(bad("holds `--` or `..`, which the Hub does not allow in an id"));
        }
    }
    Ok(())
}

/// The cache folder of a checked repo id, as hf-hub and huggingface-cli name it.
pub fn repo_folder(repo: &str) -> String {
    format!("models--{}", repo.replace('/', "--"))
}

/// A commit id: exactly 40 lowercase hex digits.
pub fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The server's commit header, checked.
pub fn commit(header: &str, raw: &str) -> Result<String> {
    if is_commit(raw) {
        Ok(raw.to_string())
    } else {
        Err(LabError::input(format!("hub: the server's {header} `{}` is not a commit id", raw.escape_debug())))
    }
}

/// An etag without its quotes and `W/` prefix: 1..=128 of `[A-Za-z0-9_-]`, the blob's name.
pub fn etag(header: &str, raw: &str) -> Result<String> {
    let t = raw.trim();
    let t = t.strip_prefix("W/").unwrap_or(t);
    let t = t.strip_prefix('"').and_then(|t| t.strip_suffix('"')).unwrap_or(t);
    let ok =
        !t.is_empty() && t.len() <= MAX_ETAG && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(t.to_string())
    } else {
        Err(LabError::input(format!("hub: the server's {header} `{}` is not a blob name", raw.escape_debug())))
    }
}

/// A file name in the repo (the user's, the sibling list's or the index's) as a relative path.
pub fn file(what: &str, name: &str) -> Result<PathBuf> {
    crate::paths::rel_name(&format!("hub: {what}"), name)
}

/// HF_ENDPOINT as an http(s) URL without control characters or whitespace, with no trailing `/`.
pub fn endpoint(raw: &str) -> Result<String> {
    let bad = |why: &str| LabError::input(format!("hub: HF_ENDPOINT `{}` {why}", raw.escape_debug()));
    if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad("holds a control character or whitespace"));
    }
    let Some((scheme, _)) = split_url(raw) else {
        return Err(bad("is not an http:// or https:// URL"));
    };
    if scheme != "http" && scheme != "https" {
        return Err(bad("is not an http:// or https:// URL"));
    }
    let authority = origin(raw).and_then(|o| o.get(scheme.len() + 3..).map(str::to_string)).unwrap_or_default();
    let host_ok = |c: char| c.is_ascii_alphanumeric() || ".-:[]_".contains(c);
    if authority.is_empty() || !authority.chars().all(host_ok) {
        return Err(bad("has no host name (or one with characters a host name does not have)"));
    }
    Ok(raw.trim_end_matches('/').to_string())
}

/// The lowercased scheme of `url` and the rest after `://`.
fn split_url(url: &str) -> Option<(String, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let ok = !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    ok.then(|| (scheme.to_ascii_lowercase(), rest))
}

/// `scheme://host[:port]` of an absolute URL, lowercased: what decides where a token may go.
pub fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = split_url(url)?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(format!("{scheme}://{}", rest.get(..end)?.to_ascii_lowercase()))
}

/// A redirect's `Location` resolved against `base`, accepted only as an http(s) URL.
pub fn redirect(base: &str, location: &str) -> std::result::Result<String, String> {
    let refuse = |why: &str| Err(format!("a redirect to `{}` {why}", location.escape_debug()));
    if location.is_empty() || location.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return refuse("is empty or holds a control character or whitespace");
    }
    let Some(from) = origin(base) else {
        return refuse("cannot be resolved");
    };
    let scheme = from.split("://").next().unwrap_or("http").to_string();
    let url = if let Some(rest) = location.strip_prefix("//") {
        format!("{scheme}://{rest}")
    } else if location.starts_with('/') {
        format!("{from}{location}")
    } else if location.split(['/', '?', '#']).next().is_some_and(|first| first.contains(':')) {
        // An absolute URL: its scheme decides.
        location.to_string()
    } else {
        let path = base.get(from.len()..).unwrap_or("");
        let path = path.split(['?', '#']).next().unwrap_or("");
        let dir = path.rfind('/').and_then(|i| path.get(..=i)).unwrap_or("/");
        format!("{from}{dir}{location}")
    };
    match split_url(&url) {
        Some((s, rest)) if (s == "http" || s == "https") && !rest.is_empty() && !rest.starts_with('/') => Ok(url),
        _ => refuse("is not an http:// or https:// URL"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_the_server_are_checked() {
        assert!(repo_id("Qwen/Qwen2.5-0.5B-Instruct").is_ok());
        for bad in [
            "org/..",
            "../x",
            "org/.x",
            "org/-x",
            "org",
            "a/b/c",
            "org/x y",
            "org/x\n",
            "org/",
            &format!("o/{}", "x".repeat(97)),
            // These two would share the cache folder models--a--b--c.
            "a--b/c",
            "a/b--c",
            "org/a..b",
        ] {
            assert!(repo_id(bad).unwrap_err().to_string().starts_with("hub: the repo id `"), "{bad:?}");
        }
        assert!(commit("X-Repo-Commit", "0123456789abcdef0123456789abcdef01234567").is_ok());
        for bad in ["../../x", "0123456789ABCDEF0123456789ABCDEF01234567", "abc", "/etc"] {
            assert!(commit("X-Repo-Commit", bad).is_err(), "{bad}");
        }
        assert_eq!(etag("ETag", "W/\"abc-1_2\"").unwrap(), "abc-1_2");
        for bad in ["\"/etc/passwd\"", "\"../x\"", "\"a\nb\"", "\"\"", "a.b", &"a".repeat(129)] {
            assert!(etag("ETag", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn endpoints_and_redirects() {
        assert_eq!(endpoint("https://hf-mirror.com/").unwrap(), "https://hf-mirror.com");
        // A scheme is case-insensitive (the fuzzer's first find, fuzz/regressions/hub_names:
        // the target's own check had taken `Https://` for another scheme).
        assert_eq!(origin(&endpoint("Https://hf-mirror.com").unwrap()).unwrap(), "https://hf-mirror.com");
        assert_eq!(endpoint("http://127.0.0.1:8080/hf").unwrap(), "http://127.0.0.1:8080/hf");
        for bad in [
            "javascript:alert(1)",
            "hf-mirror.com",
            "ftp://x",
            "http://x\u{1b}[31m",
            "http:// x",
            "http://",
            "file:///etc",
        ] {
            assert!(endpoint(bad).is_err(), "{bad:?}");
        }
        let base = "http://h:1/org/x/resolve/main/a.json";
        assert_eq!(redirect(base, "/cdn/a").unwrap(), "http://h:1/cdn/a");
        assert_eq!(redirect(base, "b.json").unwrap(), "http://h:1/org/x/resolve/main/b.json");
        assert_eq!(redirect(base, "//cdn:2/a").unwrap(), "http://cdn:2/a");
        assert_eq!(redirect(base, "https://cdn/a?x=1").unwrap(), "https://cdn/a?x=1");
        for bad in ["file:///etc/passwd", "ftp://h/x", "javascript:x", "", "http:///x", "/a\nb"] {
            assert!(redirect(base, bad).is_err(), "{bad:?}");
        }
        assert_eq!(origin("HTTP://H:1/x").unwrap(), "http://h:1");
    }
}
