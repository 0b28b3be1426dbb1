//! ggml's scheduler over the reserved graph (`ggml_backend_sched_split_graph`): the backend each
//! node runs on, and the copies it makes where a node reads another backend's tensor, each
//! allocated at the start of the run of nodes that needs it.

use super::graph::{is_gpu, Graph, Tensor, CPU, GPU, UNSET};

/// ggml's scheduler's backend for each node (`ggml_backend_sched_split_graph`, passes 1, 2 and
/// 5): a node reading a weight runs where the weight is, or on the first GPU when the weight is on
/// the host and the node handles at least 32 rows (op offload: `Tensor::batch`); one writing or
/// viewing the cache runs where the cache is; the rest, views aside, take a GPU from a neighbour
/// (down, then up), then any neighbour's backend; a view runs where what it views does.
pub fn assign(g: &mut Graph) {
    let nodes = g.nodes.clone();
    let root = |g: &Graph, i: usize| g.tensors[i].view_of.unwrap_or(i);
    for &i in &nodes {
        let t = &g.tensors[i];
        let fixed = if let Some(v) = t.view_of.filter(|&v| g.tensors[v].external) {
            Some(g.tensors[v].backend)
        } else if let Some(w) = t.srcs.iter().find(|&&s| g.tensors[s].external && g.tensors[s].view_of.is_none()) {
            let home = g.tensors[*w].backend;
            // get_rows is never offloaded (`get_op_batch_size` gives it none).
            Some(if home == CPU && t.batch >= 32 && !t.get_rows { GPU } else { home })
        } else {
            None
        };
        if let Some(b) = fixed {
            g.tensors[i].backend = b;
        }
    }
    // Views are skipped while backends spread (`ggml_is_view_op`).
    let computed: Vec<usize> = nodes.iter().copied().filter(|&i| g.tensors[i].view_of.is_none()).collect();
    for (only_gpu, reverse) in [(true, false), (true, true), (false, false), (false, true)] {
        let mut cur = UNSET;
        let seq: Vec<usize> = if reverse { computed.iter().rev().copied().collect() } else { computed.clone() };
        for i in seq {
            match g.tensors[i].backend {
                CPU if only_gpu => cur = UNSET,
                UNSET if cur != UNSET => g.tensors[i].backend = cur,
                UNSET => {}
                b => cur = b,
            }
        }
    }
    for &i in &nodes {
        if g.tensors[i].backend == UNSET {
            let r = root(g, i);
            g.tensors[i].backend = if r != i && g.tensors[r].backend != UNSET { g.tensors[r].backend } else { CPU };
        }
    }
}

/// The CUDA backend's fusions (`Graph::fusions`) whose nodes all run on one GPU: after `until`,
/// a node that reads every kept tensor and holds no bytes (ggml-backend's dependency node, op
/// NONE), so none is freed or written over in place before it.
pub fn keep_fused(g: &mut Graph) {
    let fusions = std::mem::take(&mut g.fusions);
    for f in &fusions {
        let b = g.tensors[f.until].backend;
        if !is_gpu(b) || !f.nodes.iter().all(|&i| g.tensors[i].backend == b) {
            continue;
        }
        let Some(at) = g.nodes.iter().position(|&n| n == f.until) else { continue };
        let root = g.tensors[f.kept[0]].view_of.unwrap_or(f.kept[0]);
        let dep = Tensor {
            size: 0,
            srcs: f.kept.clone(),
            view_of: Some(root),
            dep: true,
            ..g.tensors[f.kept[0]].detached(b)
        };
        g.tensors.push(dep);
        g.nodes.insert(at + 1, g.tensors.len() - 1);
    }
}

/// The scheduler's split: a run of nodes on one backend reads the other backend's tensors
/// through copies it allocates at the run's start (one copy per tensor and backend, kept while
/// any node reads it; host weights of a node offloaded to the GPU too). A node reading another
/// backend's weight starts a new run when the current one already has copies, so the last
/// weight's copy is freed before the next is made.
///
/// With pipeline parallelism (`n_copies` > 1: llama.cpp over several GPUs with every layer on them)
/// the scheduler keeps `n_copies` of every copy, allocated before the graph's first node and never
/// freed (`ggml_backend_sched_split_graph`: input and output flags on each), so that one micro-batch's
/// split can run while the next one's inputs arrive.
pub fn with_copies(mut g: Graph, n_copies: u64, alignment: u64) -> Graph {
    let mut out: Vec<usize> = Vec::with_capacity(g.nodes.len());
    let mut copies: std::collections::HashMap<(usize, usize), usize> = Default::default();
    // The current run: its backend, its copies (each after its dependency), its nodes.
    let (mut run_backend, mut run_copies, mut run_nodes) = (usize::MAX, Vec::new(), Vec::new());
    let home = |g: &Graph, s: usize| if g.tensors[s].input { CPU } else { g.tensors[s].backend };
    let nodes = g.nodes.clone();
    for node in nodes {
        let backend = g.tensors[node].backend;
        let foreign_weight = g.tensors[node].srcs.iter().any(|&s| g.tensors[s].weight && home(&g, s) != backend);
        if backend != run_backend || (foreign_weight && !run_copies.is_empty()) {
            out.append(&mut run_copies);
            out.append(&mut run_nodes);
            run_backend = backend;
        }
        let srcs = g.tensors[node].srcs.clone();
        let mut new_srcs = Vec::with_capacity(srcs.len());
        for s in srcs {
            let from = home(&g, s);
            if from == backend {
                new_srcs.push(s);
                continue;
            }
            let c = match copies.get(&(s, backend)) {
                Some(&c) => c,
                None => {
                    // The scheduler's dependency on what is copied (a view that reads it, not
                    // counted as a view): the original is released once the copy is made.
                    let dep = Tensor {
                        size: 0,
                        srcs: vec![s],
                        view_of: Some(g.tensors[s].view_of.unwrap_or(s)),
                        dep: true,
                        ..g.tensors[s].detached(from)
                    };
                    g.tensors.push(dep);
                    let mut t = g.tensors[s].detached(backend);
                    if n_copies > 1 {
                        t.size = t.size.next_multiple_of(alignment) * (n_copies - 1) + t.size;
                        (t.input, t.output) = (true, true);
                    }
                    g.tensors.push(t);
                    let c = g.tensors.len() - 1;
                    run_copies.extend([c - 1, c]);
                    copies.insert((s, backend), c);
                    c
                }
            };
            new_srcs.push(c);
        }
        g.tensors[node].srcs = new_srcs;
        run_nodes.push(node);
    }
    out.append(&mut run_copies);
    out.append(&mut run_nodes);
    g.nodes = out;
    g
}
