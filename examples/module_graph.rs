//! The module graph of `src/`, read from the code: which file imports which (`use crate::…`,
//! `super::…`, a child module's path), each file's layer, the imports that go upward and the import
//! circles. `cargo run --example module_graph` prints it; `-- --write` rewrites
//! docs/module-graph.md; `tests/layers.rs` fails on an upward import, a circle or a stale page.
//!
//! Files, not modules, are the nodes: a `mod.rs` that only declares and re-exports its children is
//! a signpost, so a path through one of its `pub use` lines counts as an import of the file that
//! defines the item. Test modules (`#[cfg(test)] mod tests`) are left out: they may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: a file may import its own layer and the ones below (never a circle).
pub const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundation: units, errors, limits, checked paths, search, polars helpers, where the record is, the stop signal",
        &["units", "error", "limits", "paths", "search", "frame", "record", "stop"],
    ),
    ("hardware: cards and devices", &["hw"]),
    ("measuring memory", &["memory"]),
    ("the model: config, formats, layers, kernels, decoding", &["model"]),
    ("formulas: ledger, transient, training, fit, the pool model; the report's figures", &["estimate", "reference"]),
    ("the run: session (devices, run folder, manifest), the stage contract", &["session", "stage"]),
    ("the stages", &["experiments"]),
    ("rendering any stage's views: console, HTML, notebook output", &["report"]),
    ("entry points: notebooks, commands, the binary", &["notebook", "commands", "main", "lib"]),
];

/// model/'s own sub-layers, lowest first, by folder (or a file of model/ itself): a file of model/ imports its own
/// sub-layer and the ones below. A folder is one concern; no file of one is placed apart from its folder.
pub const MODEL_LAYERS: &[(&str, &[&str])] = &[
    ("the config: families, the fields taken, the tensor layout; a step's timers", &["model::config", "model::quantize", "model::profile"]),
    (
        "formats and dtypes: precision, GGUF, where weights come from (safetensors, the Hub, checkpoints, tokenizers, chat templates)",
        &["model::precision", "model::gguf", "model::load"],
    ),
    (
        "layers and kernels: linear (and the ranks' sum), embedding, attention, KV cache, a step's inputs, the CPU path, where layers live",
        &["model::kernels", "model::layers", "model::host", "model::offload"],
    ),
    ("the decoder: its layer, the streamer of offloaded layers, the model; a source opened and loaded", &["model::decoder", "model::source"]),
    ("running it: generation, sampling, the decode graph, training, several GPUs", &["model::generate", "model::train", "model::parallel"]),
];

/// The sub-layer of a module inside model/ (None for the facade `model` and outside model/).
pub fn model_layer_of(module: &str) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (i, (_, prefixes)) in MODEL_LAYERS.iter().enumerate() {
        for p in prefixes.iter().filter(|p| module == **p || module.starts_with(&format!("{p}::"))) {
            if best.is_none_or(|(_, len)| p.len() > len) {
                best = Some((i, p.len()));
            }
        }
    }
    best.map(|(i, _)| i)
}

/// The layer of a module path (`model::gguf::header`): its first segment's.
pub fn layer_of(module: &str) -> Option<usize> {
    let top = module.split("::").next().unwrap_or("");
    LAYERS.iter().position(|(_, mods)| mods.contains(&top))
}

pub struct Graph {
    /// The `src/` folder read.
    pub root: PathBuf,
    /// Module path → file.
    pub files: BTreeMap<String, PathBuf>,
    /// Module → the modules (files) it imports.
    pub edges: BTreeMap<String, BTreeSet<String>>,
}

impl Graph {
    pub fn read(src: &Path) -> std::io::Result<Self> {
        let mut files = BTreeMap::new();
        collect(src, src, &mut files)?;
        let texts: BTreeMap<String, String> = files
            .iter()
            .map(|(m, p)| Ok((m.clone(), code_of(&std::fs::read_to_string(p)?))))
            .collect::<std::io::Result<_>>()?;
        let uses: BTreeMap<&String, Vec<(bool, Vec<String>)>> =
            texts.iter().map(|(m, t)| (m, use_paths(t, m, is_mod_file(&files[m])))).collect();
        // What each file re-exports, by the name it is reached under.
        let reexports: BTreeMap<String, BTreeMap<String, Vec<String>>> = uses
            .iter()
            .map(|(m, paths)| {
                let names = paths
                    .iter()
                    .filter(|(public, _)| *public)
                    .filter_map(|(_, path)| Some((path.last()?.clone(), path.clone())))
                    .collect();
                ((*m).clone(), names)
            })
            .collect();
        let modules: BTreeSet<String> = files.keys().cloned().collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (m, t) in &texts {
            let mod_file = is_mod_file(&files[m]);
            let mut paths: Vec<Vec<String>> =
                uses[m].iter().filter(|(public, _)| !(*public && mod_file)).map(|(_, p)| p.clone()).collect();
            paths.extend(inline_paths(&without_uses(t), m, mod_file, &modules));
            let set = edges.entry(m.clone()).or_default();
            for p in paths {
                if let Some(target) = resolve(&p, &modules, &reexports, 0) {
                    if &target != m && !target.is_empty() {
                        set.insert(target);
                    }
                }
            }
        }
        Ok(Self { root: src.to_path_buf(), files, edges })
    }

    /// (from, to) pairs where `to` sits in a higher layer than `from`.
    pub fn upward(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (from, tos) in &self.edges {
            for to in tos {
                if let (Some(a), Some(b)) = (layer_of(from), layer_of(to)) {
                    if b > a {
                        out.push((from.clone(), to.clone()));
                    }
                }
            }
        }
        out
    }

    /// The imports inside model/ that go up its sub-layers (`MODEL_LAYERS`). The facade
    /// (`model/mod.rs`, re-exports only) is no file's import.
    pub fn model_upward(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (from, tos) in &self.edges {
            for to in tos {
                if let (Some(a), Some(b)) = (model_layer_of(from), model_layer_of(to)) {
                    if b > a {
                        out.push((from.clone(), to.clone()));
                    }
                }
            }
        }
        out
    }

    /// The imports between model/'s folders (a file of model/ itself counts as a folder; the facade as none).
    pub fn model_folder_edges(&self) -> BTreeSet<(String, String)> {
        let folder = |m: &str| -> Option<String> {
            let parts: Vec<&str> = m.split("::").collect();
            (parts.len() >= 2 && parts[0] == "model").then(|| parts[..2].join("::"))
        };
        let mut out = BTreeSet::new();
        for (from, tos) in &self.edges {
            for to in tos {
                if let (Some(a), Some(b)) = (folder(from), folder(to)) {
                    if a != b {
                        out.insert((a, b));
                    }
                }
            }
        }
        out
    }

    /// The folder imports of model/ that run up its sub-layers.
    pub fn model_folders_upward(&self) -> Vec<(String, String)> {
        self.model_folder_edges()
            .into_iter()
            .filter(|(a, b)| matches!((model_layer_of(a), model_layer_of(b)), (Some(x), Some(y)) if y > x))
            .collect()
    }

    /// Files of model/ without a sub-layer in `MODEL_LAYERS`.
    pub fn model_unplaced(&self) -> Vec<String> {
        self.files.keys().filter(|m| m.starts_with("model::") && model_layer_of(m).is_none()).cloned().collect()
    }

    /// Modules without a layer in `LAYERS`.
    pub fn unplaced(&self) -> Vec<String> {
        self.files.keys().filter(|m| layer_of(m).is_none()).cloned().collect()
    }

    /// The import circles: strongly connected sets of more than one file (Tarjan).
    pub fn circles(&self) -> Vec<Vec<String>> {
        struct T<'a> {
            g: &'a BTreeMap<String, BTreeSet<String>>,
            index: BTreeMap<String, usize>,
            low: BTreeMap<String, usize>,
            stack: Vec<String>,
            on: BTreeSet<String>,
            out: Vec<Vec<String>>,
        }
        fn visit(t: &mut T, v: &str) {
            let i = t.index.len();
            t.index.insert(v.into(), i);
            t.low.insert(v.into(), i);
            t.stack.push(v.into());
            t.on.insert(v.into());
            for w in t.g.get(v).into_iter().flatten() {
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if t.low[v] == t.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = t.stack.pop() {
                    t.on.remove(&w);
                    let done = w == v;
                    comp.push(w);
                    if done {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    t.out.push(comp);
                }
            }
        }
        let mut t = T {
            g: &self.edges,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on: BTreeSet::new(),
            out: Vec::new(),
        };
        for v in self.files.keys() {
            if !t.index.contains_key(v) {
                visit(&mut t, v);
            }
        }
        t.out
    }

    /// docs/module-graph.md: the layers with their files, and a Mermaid picture of
    /// the imports between top-level modules (a file's imports are listed under it).
    pub fn page(&self) -> String {
        let mut s = String::from(
            "# Module graph\n\nGenerated from the `use` lines of `src/` by `cargo run --example module_graph -- --write`; \
            `tests/layers.rs` fails when this page is stale, when a file imports a higher layer, or when files import each other in a circle.\n\n",
        );
        s += "The layers' modules and which import which (a file's own imports are in its row below):\n\n```mermaid\nflowchart BT\n";
        let mut top_edges = BTreeSet::new();
        for (from, tos) in &self.edges {
            for to in tos {
                let (a, b) = (group(from), group(to));
                if a != b {
                    top_edges.insert((a, b));
                }
            }
        }
        for (a, b) in &top_edges {
            s += &format!("  {} --> {}\n", a.replace("::", "_"), b.replace("::", "_"));
        }
        s += "```\n\n";
        for (i, (what, _)) in LAYERS.iter().enumerate().rev() {
            s += &format!("## {i}. {what}\n\n| file | imports |\n|---|---|\n");
            for (m, p) in self.files.iter().filter(|(m, _)| layer_of(m) == Some(i)) {
                let imports: Vec<&str> = self.edges.get(m).into_iter().flatten().map(|s| s.as_str()).collect();
                // Relative to the crate (`src/…`), so the page is the same in every checkout.
                let shown = p.strip_prefix(self.root.parent().unwrap_or(&self.root)).unwrap_or(p);
                s += &format!("| `{}` | {} |\n", shown.display(), imports.join(", "));
            }
            s += "\n";
        }
        s += "## model/, by sub-layer (lowest first; a file imports its own and those below)\n\n";
        for (i, (what, prefixes)) in MODEL_LAYERS.iter().enumerate() {
            s +=
                &format!("{i}. {what}: {}\n", prefixes.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", "));
        }
        s += "\nmodel/ folder by folder (a file of model/ itself is its own node; an arrow is an import):\n\n```mermaid\nflowchart BT\n";
        for (a, b) in self.model_folder_edges() {
            s += &format!("  {} --> {}\n", a.replace("::", "_"), b.replace("::", "_"));
        }
        s += "```\n\n";
        let up = self.model_folders_upward();
        s += &format!(
            "Folder arrows running up model/'s sub-layers: {}.\n\n",
            if up.is_empty() { "none".to_string() } else { format!("{up:?}") }
        );
        let circles = self.circles();
        s += &format!("Circles: {}.\n", if circles.is_empty() { "none".to_string() } else { format!("{circles:?}") });
        s
    }
}

/// The node a module is drawn as: its top-level module (`model::gguf::header` → `model`).
fn group(m: &str) -> String {
    m.split("::").next().unwrap_or(m).to_string()
}

fn is_mod_file(p: &Path) -> bool {
    matches!(p.file_name().and_then(|n| n.to_str()), Some("mod.rs" | "lib.rs" | "main.rs"))
}

fn collect(root: &Path, dir: &Path, out: &mut BTreeMap<String, PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            collect(root, &p, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(root).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
            if parts.last().is_some_and(|l| l == "mod") {
                parts.pop();
            }
            out.insert(parts.join("::"), p);
        }
    }
    Ok(())
}

/// The code without comments, string and char literals, and test modules.
pub fn code_of(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == '*' && b[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !b.get(i.wrapping_sub(1)).is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '"') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    cut_tests(&out)
}

fn cut_tests(code: &str) -> String {
    let mut s = code.to_string();
    while let Some(at) = s.find("#[cfg(test)]") {
        let rest = &s[at..];
        // An item after the attribute: up to its matching brace, or its semicolon.
        let open = rest.find('{');
        let semi = rest.find(';');
        let end = match (open, semi) {
            (Some(o), Some(sc)) if sc < o => at + sc + 1,
            (Some(o), _) => {
                let mut depth = 0;
                let mut end = s.len();
                for (k, ch) in rest[o..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = at + o + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(sc)) => at + sc + 1,
            (None, None) => s.len(),
        };
        s.replace_range(at..end, "");
    }
    s
}

/// The absolute module path a path written in `module` means: `crate::a` → `a`, `super::b` → the
/// parent's `b`, `self::c` or a child's name in a mod.rs → `module::c`.
fn absolute(module: &str, segs: &[String]) -> Vec<String> {
    // lib.rs and main.rs are the crate's root.
    let root = matches!(module, "lib" | "main");
    let here: Vec<String> = if root { vec![] } else { module.split("::").map(String::from).collect() };
    let mut i = 0;
    let mut base = match segs.first().map(|s| s.as_str()) {
        Some("crate" | "vram_lab") => {
            i = 1;
            vec![]
        }
        Some("self") => {
            i = 1;
            here.clone()
        }
        Some("super") => here.clone(),
        _ => here.clone(),
    };
    while segs.get(i).is_some_and(|s| s == "super") {
        base.pop();
        i += 1;
    }
    base.extend(segs[i..].iter().cloned());
    base
}

/// Every path of every `use` item: (is it `pub use`, the absolute path).
fn use_paths(code: &str, module: &str, mod_file: bool) -> Vec<(bool, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = find_word(rest, "use") {
        let before = rest[..at].trim_end();
        let public = before.ends_with("pub") || before.ends_with("pub(crate)") || before.ends_with("pub(super)");
        let after = &rest[at + 3..];
        let Some(end) = after.find(';') else { break };
        let tree: String = after[..end].chars().filter(|c| !c.is_whitespace()).collect();
        for p in expand(&tree) {
            let first = p.first().map(|s| s.as_str()).unwrap_or("");
            // Only paths into the crate: `crate::`, `super::`, `self::` or a child module's name.
            let relative_child = mod_file && !matches!(first, "crate" | "super" | "self" | "std" | "core" | "alloc");
            if matches!(first, "crate" | "super" | "self" | "vram_lab") || relative_child {
                out.push((public, absolute(module, &p)));
            }
        }
        rest = &after[end..];
    }
    out
}

/// Paths written inside the code: `crate::a::b`, `super::c`, and in a mod.rs its children's names.
fn inline_paths(code: &str, module: &str, mod_file: bool, modules: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_alphabetic() || chars[i] == '_';
        let prev_ok = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == ':');
        if starts && prev_ok {
            let mut j = i;
            let mut segs = Vec::new();
            loop {
                let s0 = j;
                while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                    j += 1;
                }
                segs.push(chars[s0..j].iter().collect::<String>());
                if chars.get(j) == Some(&':')
                    && chars.get(j + 1) == Some(&':')
                    && chars.get(j + 2).is_some_and(|c| c.is_alphabetic() || *c == '_')
                {
                    j += 2;
                } else {
                    break;
                }
            }
            if segs.len() > 1 {
                let first = segs[0].as_str();
                let child = mod_file && {
                    let m =
                        if matches!(module, "lib" | "main") { first.to_string() } else { format!("{module}::{first}") };
                    modules.contains(&m)
                };
                if matches!(first, "crate" | "super" | "vram_lab") || child {
                    out.push(absolute(module, &segs));
                }
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The code with its `use` items cut out (their paths are read by `use_paths`).
fn without_uses(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = find_word(rest, "use") {
        out.push_str(&rest[..at]);
        match rest[at..].find(';') {
            Some(end) => rest = &rest[at + end + 1..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

fn find_word(s: &str, w: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(k) = s[from..].find(w) {
        let at = from + k;
        let before = s[..at].chars().last();
        let after = s[at + w.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !word(before) && !word(after) {
            return Some(at);
        }
        from = at + w.len();
    }
    None
}

/// `a::{b, c::{d, e}}` → [a::b, a::c::d, a::c::e]; `a::b as x` → [a::b]; `a::*` → [a].
fn expand(tree: &str) -> Vec<Vec<String>> {
    fn go(prefix: &[String], t: &str, out: &mut Vec<Vec<String>>) {
        let t = t.trim();
        if t.is_empty() {
            return;
        }
        if let Some(inner) = t.strip_prefix('{').and_then(|x| x.strip_suffix('}')) {
            let mut depth = 0;
            let mut start = 0;
            for (k, ch) in inner.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        go(prefix, &inner[start..k], out);
                        start = k + 1;
                    }
                    _ => {}
                }
            }
            go(prefix, &inner[start..], out);
            return;
        }
        match t.find("::{") {
            Some(k) if !t[..k].contains('{') => {
                let mut p = prefix.to_vec();
                p.extend(t[..k].split("::").filter(|s| !s.is_empty()).map(String::from));
                go(&p, &t[k + 2..], out);
            }
            _ => {
                let t = t.split("as").next().unwrap_or(t);
                let mut p = prefix.to_vec();
                p.extend(t.split("::").filter(|s| !s.is_empty() && *s != "*" && *s != "self").map(String::from));
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    go(&[], tree, &mut out);
    out
}

/// The file a path lands in: the longest module prefix, then through that module's re-exports.
fn resolve(
    path: &[String],
    modules: &BTreeSet<String>,
    reexports: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
    depth: usize,
) -> Option<String> {
    for k in (0..=path.len()).rev() {
        let m = path[..k].join("::");
        if modules.contains(&m) {
            if depth < 8 {
                if let Some(name) = path.get(k) {
                    if let Some(target) = reexports.get(&m).and_then(|r| r.get(name)) {
                        let mut full = target.clone();
                        full.extend(path[k + 1..].iter().cloned());
                        if full != path {
                            return resolve(&full, modules, reexports, depth + 1);
                        }
                    }
                }
            }
            return Some(m);
        }
    }
    None
}

#[allow(dead_code)]
fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let g = Graph::read(&root.join("src"))?;
    let page = g.page();
    if std::env::args().any(|a| a == "--write") {
        std::fs::write(root.join("docs/module-graph.md"), &page)?;
        println!("wrote docs/module-graph.md");
    } else {
        for (from, tos) in &g.edges {
            println!(
                "{from} [{}] -> {}",
                layer_of(from).map(|l| l.to_string()).unwrap_or("?".into()),
                tos.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
    for (a, b) in g.upward() {
        println!("upward: {a} -> {b}");
    }
    for m in g.unplaced() {
        println!("no layer: {m}");
    }
    for c in g.circles() {
        println!("circle: {}", c.join(" ↔ "));
    }
    Ok(())
}
