//! The graph llama.cpp reserves its compute buffers with (`llama_context::sched_reserve`: a
//! prompt micro-batch of `min(n_ctx, n_ubatch)` tokens, every one an output, over the whole KV
//! cache), node by node in the order ggml builds it for a decoder (`src/models/qwen2.cpp`,
//! `llama.cpp`, `qwen3.cpp`, `qwen3moe.cpp`, `gemma3.cpp`, `openai-moe.cpp`;
//! `llm_graph_context::build_attn`, `build_ffn`, `build_moe_ffn`), with the backend each node runs on and the copies ggml's scheduler makes
//! where a node reads another backend's tensor (`sched`). `alloc::reserve` walks it.

use crate::model::config::{DecoderConfig, Experts, Family};

/// The scheduler's backends in its order of priority: the GPUs from 0 (the first takes what op
/// offload moves off the host), then the host, last.
pub const MAX_GPUS: usize = 16;
pub const GPU: usize = 0;
pub const CPU: usize = MAX_GPUS;
/// Not yet assigned to a backend (`sched::assign` assigns every node).
pub const UNSET: usize = MAX_GPUS + 1;

/// Whether `backend` is one of the GPUs.
pub fn is_gpu(backend: usize) -> bool {
    backend < CPU
}

/// One tensor of the graph: a node, an input, or an external (a weight, the KV cache).
#[derive(Clone, Debug)]
pub struct Tensor {
    /// Bytes its buffer type allocates (`get_alloc_size`).
    pub size: u64,
    pub srcs: Vec<usize>,
    pub view_of: Option<usize>,
    /// Its op may write over its first same-layout parent (`ggml_op_can_inplace`).
    pub inplace: bool,
    pub input: bool,
    pub output: bool,
    /// Bytes that live elsewhere (weights, the KV cache): never allocated here.
    pub external: bool,
    /// A weight (an external that is not the cache): reading one from another backend starts a
    /// new split, so the copies of the last one's weights can be reused.
    pub weight: bool,
    pub backend: usize,
    /// Same layout, same bytes: what in-place reuse compares (`ggml_are_same_layout`).
    pub layout: (u32, [u64; 3]),
    /// A flash-attention node: the K (and V) values it may hold as F16 copies.
    pub fa_cells: u64,
    /// ggml_get_rows (the embedding lookup, the outputs' rows): never offloaded for its rows.
    pub get_rows: bool,
    /// The rows a GPU weighs before taking the node over from the host (`get_op_batch_size`:
    /// a `mul_mat_id`'s tokens, every other node's rows).
    pub batch: u64,
    /// The scheduler's dependency node before a copy: reads what is copied, holds no bytes and
    /// does not count as a view of it.
    pub dep: bool,
}

/// No layout: weights and caches are never allocated here, so never reused in place.
const NO_LAYOUT: (u32, [u64; 3]) = (u32::MAX, [0; 3]);

impl Tensor {
    /// A tensor of `size` bytes and `layout` on `backend`: no sources, no view, no flags.
    fn plain(size: u64, layout: (u32, [u64; 3]), backend: usize) -> Tensor {
        Tensor {
            size,
            srcs: vec![],
            view_of: None,
            inplace: false,
            input: false,
            output: false,
            external: false,
            weight: false,
            backend,
            layout,
            fa_cells: 0,
            get_rows: false,
            batch: 0,
            dep: false,
        }
    }

    /// The same bytes and layout as a plain tensor of `backend`.
    pub fn detached(&self, backend: usize) -> Tensor {
        Tensor::plain(self.size, self.layout, backend)
    }
}

#[derive(Default)]
pub struct Graph {
    pub tensors: Vec<Tensor>,
    pub nodes: Vec<usize>,
    /// Where the CUDA backend fuses a run of nodes and keeps their tensors until a later node
    /// (`ggml_backend_cuda_graph_optimize`'s `add_alloc_dep`): applied by `keep_fused` once every
    /// node has its backend.
    pub fusions: Vec<Fusion>,
}

/// Tensors a fused CUDA kernel reads or writes, kept allocated until `until` has been allocated.
#[derive(Clone, Debug)]
pub struct Fusion {
    pub nodes: Vec<usize>,
    pub kept: Vec<usize>,
    pub until: usize,
}

/// What shapes the reserved graph: the micro-batch, the KV cells, attention's path, the cache's
/// types (their bytes per value), and which device each layer runs on (each weight's own place
/// comes with its bytes: `WeightBytes`).
pub struct Shape {
    pub tokens: u64,
    /// The rows the last layer keeps (`n_outputs` of the reserve: every token for
    /// llama-completion, one per slot for llama-server).
    pub outputs: u64,
    pub kv_cells: u64,
    /// The windowed layers' cells (`kv_cells` when the model has none).
    pub swa_cells: u64,
    pub flash: bool,
    /// Bytes per row of `kv_dim` values of K and of V in the cache.
    pub k_row: u64,
    pub v_row: u64,
    pub k_quantized: bool,
    pub v_quantized: bool,
    /// The Hadamard matrices' sides a quantized K and V cache rotate their rows by
    /// (`llama_kv_cache`'s `attn_rot_k`, `attn_rot_v`); 0 for none.
    pub k_rot: u64,
    pub v_rot: u64,
    /// Each layer's backend, the output layer's last (`devices::layer_devices`).
    pub layer_backend: Vec<usize>,
}

const F32: u32 = 0;
const F16: u32 = 1;
const I32: u32 = 26;
const I64: u32 = 27;

fn bytes_of(ty: u32, elems: u64) -> u64 {
    match ty {
        F16 => 2 * elems,
        I64 => 8 * elems,
        _ => 4 * elems,
    }
}

impl Graph {
    fn push(&mut self, t: Tensor) -> usize {
        self.tensors.push(t);
        self.tensors.len() - 1
    }

    /// A weight of `size` bytes held in `backend`'s memory.
    fn weight(&mut self, backend: usize, size: u64) -> usize {
        self.push(Tensor { external: true, weight: true, ..Tensor::plain(size, NO_LAYOUT, backend) })
    }

    /// A layer's K or V cache of `size` bytes on `backend`: external, but not a weight.
    fn cache(&mut self, backend: usize, size: u64) -> usize {
        self.push(Tensor { external: true, ..Tensor::plain(size, NO_LAYOUT, backend) })
    }

    fn input(&mut self, ty: u32, ne: [u64; 3]) -> usize {
        self.push(Tensor { input: true, ..Tensor::plain(bytes_of(ty, ne.iter().product()), (ty, ne), CPU) })
    }

    /// A node making a new tensor of `ne` in `ty`; its backend is assigned once the graph is whole.
    fn op(&mut self, srcs: &[usize], ty: u32, ne: [u64; 3], inplace: bool) -> usize {
        let get_rows = !inplace && srcs.len() == 2 && self.tensors[srcs[1]].layout.0 == I32;
        // A mul_mat_id reads the experts' weights first and their ids third; the GPU weighs its
        // tokens, not its rows (an add_id, which reads the ids third too, by its rows).
        let expert_product = srcs.len() == 3 && self.tensors[srcs[2]].layout.0 == I32 && self.tensors[srcs[0]].weight;
        let t = self.push(Tensor {
            srcs: srcs.to_vec(),
            inplace,
            get_rows,
            batch: if expert_product { ne[2] } else { ne[1] * ne[2] },
            ..Tensor::plain(bytes_of(ty, ne.iter().product()), (ty, ne), UNSET)
        });
        self.nodes.push(t);
        t
    }

    /// A view node (reshape, permute, view, or a write into `of` such as set_rows, reading
    /// `more`): no bytes of its own; as large as what it views, should another backend copy it.
    fn view(&mut self, of: usize, more: &[usize]) -> usize {
        let root = self.tensors[of].view_of.unwrap_or(of);
        let srcs = [&[of][..], more].concat();
        let v = self.push(Tensor { srcs, view_of: Some(root), ..self.tensors[of].detached(UNSET) });
        self.nodes.push(v);
        v
    }
}

/// Where layer `il`'s weight `name` (`attn_q`, `ffn_down`, `ffn_up_exps`, …; `output` and
/// `output_norm` with `il` = the layer count) lives, and its bytes as a CUDA buffer holds it (what
/// a copy onto the GPU takes).
pub type WeightBytes<'a> = &'a dyn Fn(usize, &str) -> (usize, u64);

/// A mixture's feed-forward block as `build_moe_ffn` makes it for Qwen3-MoE and Mixtral (softmax
/// router, the chosen experts' weights renormalized), over `cur` of `n` rows, in the order ggml's
/// graph visits it: the router's weights first (llama.cpp expands them early), then the three
/// expert products, then the experts' outputs summed one view at a time.
fn experts(g: &mut Graph, w: &dyn Fn(&mut Graph, &str) -> usize, cur: usize, n: u64, e: u64, x: Experts) -> usize {
    let (all, k, ff) = (x.experts as u64, x.active as u64, x.width as u64);
    let router = w(g, "ffn_gate_inp");
    let logits = g.op(&[router, cur], F32, [all, n, 1], false);
    let probs = g.op(&[logits], F32, [all, n, 1], true);
    let probs_3d = g.view(probs, &[]);
    let argsort = g.op(&[probs], I32, [all, n, 1], false);
    let chosen = g.view(argsort, &[]);
    let weights = g.op(&[probs_3d, chosen], F32, [1, k, n], false);
    let weights_2d = g.view(weights, &[]);
    let sum = g.op(&[weights_2d], F32, [1, n, 1], false);
    let clamped = g.op(&[sum], F32, [1, n, 1], true);
    let normed = g.op(&[weights_2d, clamped], F32, [k, n, 1], true);
    let weights_3d = g.view(normed, &[]);
    let cur_3d = g.view(cur, &[]);
    // topk-moe (for the expert counts it is instantiated for): the router's nodes and what they
    // read, kept until the node after them.
    if (all.is_power_of_two() && all <= 512) || all == 288 || all == 576 {
        let gating = [probs, probs_3d, argsort, chosen, weights, weights_2d, sum, clamped, normed, weights_3d];
        g.fusions.push(Fusion { nodes: gating.to_vec(), kept: [&[logits][..], &gating[..]].concat(), until: cur_3d });
    }
    let product = |g: &mut Graph, name: &str, input: usize, rows: u64| {
        let wt = w(g, name);
        g.op(&[wt, input, chosen], F32, [rows, k, n], false)
    };
    let gate = product(g, "ffn_gate_exps", cur_3d, ff);
    let up = product(g, "ffn_up_exps", cur_3d, ff);
    let glu = g.op(&[gate, up], F32, [ff, k, n], false);
    let down = product(g, "ffn_down_exps", glu, e);
    weighted_sum(g, down, weights_3d, e, k, n)
}

/// gpt-oss's mixture (`build_moe_ffn` with `LLM_FFN_SWIGLU_OAI_MOE` and
/// `SOFTMAX_WEIGHT` gating, src/models/openai-moe.cpp): the router biased, the experts picked on
/// its logits and their weights a softmax over the picked four; each expert product biased
/// (`add_id`), gate before up (swiglu_oai's first source).
fn experts_oss(g: &mut Graph, w: &dyn Fn(&mut Graph, &str) -> usize, cur: usize, n: u64, e: u64, x: Experts) -> usize {
    let (all, k, ff) = (x.experts as u64, x.active as u64, x.width as u64);
    let router = w(g, "ffn_gate_inp");
    let logits = g.op(&[router, cur], F32, [all, n, 1], false);
    let router_bias = w(g, "ffn_gate_inp.bias");
    let logits = g.op(&[logits, router_bias], F32, [all, n, 1], true);
    let probs_3d = g.view(logits, &[]);
    let argsort = g.op(&[logits], I32, [all, n, 1], false);
    let chosen = g.view(argsort, &[]);
    let weights = g.op(&[probs_3d, chosen], F32, [1, k, n], false);
    let weights_2d = g.view(weights, &[]);
    let softmax = g.op(&[weights_2d], F32, [k, n, 1], true);
    let weights_3d = g.view(softmax, &[]);
    let cur_3d = g.view(cur, &[]);
    let product = |g: &mut Graph, name: &str, input: usize, rows: u64| {
        let wt = w(g, name);
        let p = g.op(&[wt, input, chosen], F32, [rows, k, n], false);
        let bias = w(g, &format!("{name}.bias"));
        g.op(&[p, bias, chosen], F32, [rows, k, n], true)
    };
    let gate = product(g, "ffn_gate_exps", cur_3d, ff);
    let up = product(g, "ffn_up_exps", cur_3d, ff);
    let glu = g.op(&[gate, up], F32, [ff, k, n], false);
    let down = product(g, "ffn_down_exps", glu, e);
    weighted_sum(g, down, weights_3d, e, k, n)
}

/// The experts' outputs `down` ([e, k, n]) times their weights, summed one view at a time.
fn weighted_sum(g: &mut Graph, down: usize, weights_3d: usize, e: u64, k: u64, n: u64) -> usize {
    let weighted = g.op(&[down, weights_3d], F32, [e, k, n], true);
    // Each expert's rows are a strided view: never a parent a sum can write over.
    let views: Vec<usize> = (0..k).map(|_| g.view(weighted, &[])).collect();
    let mut out = views[0];
    for &v in &views[1..] {
        out = g.op(&[out, v], F32, [e, n, 1], true);
    }
    if k == 1 {
        out = g.op(&[out], F32, [e, n, 1], false);
    }
    // The weighted sum of 2 to 15 experts is one kernel reading the experts' products and their
    // weights while it writes the sum: both kept until the sum.
    if (2..=15).contains(&k) {
        g.fusions.push(Fusion {
            nodes: [&[weighted][..], &views[..]].concat(),
            kept: vec![down, weights_3d],
            until: out,
        });
    }
    out
}

/// `x` (`elems` values) times a Hadamard matrix `rot` of `n` × `n` when there is one
/// (`llama_mul_mat_hadamard`: a reshaped view, the product, a view back), else `x`.
fn rotated(g: &mut Graph, x: usize, rot: Option<usize>, n: u64, elems: u64) -> usize {
    let Some(rot) = rot else { return x };
    let flat = g.view(x, &[]);
    let product = g.op(&[rot, flat], F32, [n, elems / n, 1], false);
    g.view(product, &[])
}

/// RMS norm of `cur` (`m` rows of `e`) times the layer's weight `name`: Gemma 3's norms after
/// the attention and the MLP.
fn post_norm(g: &mut Graph, w: &dyn Fn(&mut Graph, &str) -> usize, cur: usize, m: u64, e: u64, name: &str) -> usize {
    let norm = g.op(&[cur], F32, [e, m, 1], true);
    let wn = w(g, name);
    g.op(&[norm, wn], F32, [e, m, 1], true)
}

/// Whether llama.cpp keeps a second, windowed cache for `cfg` (`llama_kv_cache_iswa`): Gemma 3's
/// and gpt-oss's. Mistral v0.1's window is not llama.cpp's: it runs Mistral as its `llama`, whose
/// graph attends to the whole cache (src/models/llama.cpp).
pub fn windowed(cfg: &DecoderConfig) -> bool {
    matches!(cfg.model_type, Family::Gemma3 | Family::GptOss) && cfg.sliding_window.is_some()
}

/// The reserved graph of `cfg` over `s`, in ggml's node order; `sched` gives each node its
/// backend and adds the copies between backends.
pub fn build(cfg: &DecoderConfig, s: &Shape, weight: WeightBytes) -> Graph {
    let mut g = Graph::default();
    let n = s.tokens;
    let (e, q, kv, hd) = (cfg.hidden_size as u64, cfg.q_dim() as u64, cfg.kv_dim() as u64, cfg.head_dim() as u64);
    let (h, hkv, ff, vocab) = (
        cfg.num_attention_heads as u64,
        cfg.num_key_value_heads as u64,
        cfg.intermediate_size as u64,
        cfg.vocab_size as u64,
    );
    let layers = cfg.num_hidden_layers;
    let bias = cfg.model_type.qkv_bias();
    let qk_norm = cfg.model_type.qk_norm();
    // Gemma 3: the embedding scaled, q scaled after RoPE, the attention's and the MLP's outputs
    // normalised before their residual sums.
    let gemma = cfg.model_type.post_norms();
    // gpt-oss: sinks in the softmax, the attention's output biased, its own mixture, and every
    // layer over all tokens (the outputs' rows taken after the last layer).
    let oss = cfg.model_type.biases();
    let windowed = windowed(cfg);

    // The token embedding is read on the host (llama.cpp keeps the input layer there).
    let tok_embd = g.weight(CPU, 0);
    let tokens = g.input(I32, [n, 1, 1]);
    let mut inp_l = g.op(&[tok_embd, tokens], F32, [e, n, 1], false);
    if gemma {
        inp_l = g.op(&[inp_l], F32, [e, n, 1], true);
    }
    let pos = g.input(I32, [n, 1, 1]);
    // One cache's write positions and mask (`build_attn_inp_kv`); the windowed cache has its own
    // (`build_attn_inp_kv_iswa`: the full cache's first).
    let cache_inputs = |g: &mut Graph, cells: u64| {
        let k_idxs = g.input(I64, [n, 1, 1]);
        let v_idxs = g.input(I64, [if s.flash { n } else { n * kv }, 1, 1]);
        let mask = g.input(if s.flash { F16 } else { F32 }, [cells, n, 1]);
        (k_idxs, v_idxs, mask)
    };
    let full = cache_inputs(&mut g, s.kv_cells);
    let swa = if windowed { cache_inputs(&mut g, s.swa_cells) } else { full };
    // Each cache's Hadamard matrices (`build_input_k_rot`, `build_input_v_rot`), after both caches'
    // positions and masks.
    let rot_inputs = |g: &mut Graph| {
        let k = (s.k_rot > 0).then(|| g.input(F32, [s.k_rot, s.k_rot, 1]));
        let v = (s.v_rot > 0).then(|| g.input(F32, [s.v_rot, s.v_rot, 1]));
        (k, v)
    };
    let full_rot = rot_inputs(&mut g);
    let swa_rot = if windowed { rot_inputs(&mut g) } else { full_rot };
    let no = s.outputs.min(n).max(1);
    let out_ids = g.input(I32, [no, 1, 1]);

    for il in 0..layers {
        let b = s.layer_backend[il];
        let w = |g: &mut Graph, name: &str| {
            let (home, bytes) = weight(il, name);
            g.weight(home, bytes)
        };
        let inp_sa = inp_l;
        let windowed_layer = windowed && cfg.is_swa(il);
        let (k_idxs, v_idxs, mask) = if windowed_layer { swa } else { full };
        let (k_rot, v_rot) = if windowed_layer { swa_rot } else { full_rot };
        let cells = if windowed_layer { s.swa_cells } else { s.kv_cells };
        let norm = g.op(&[inp_l], F32, [e, n, 1], true);
        let wn = w(&mut g, "attn_norm");
        let cur = g.op(&[norm, wn], F32, [e, n, 1], true);
        let proj = |g: &mut Graph, name: &str, width: u64| {
            let wt = w(g, name);
            let mut t = g.op(&[wt, cur], F32, [width, n, 1], false);
            if bias {
                let (home, bytes) = weight(il, &format!("{name}.bias"));
                let bt = g.weight(home, bytes);
                t = g.op(&[t, bt], F32, [width, n, 1], true);
            }
            t
        };
        let head_norm = |g: &mut Graph, t: usize, heads: u64, name: &str| {
            if !qk_norm {
                return t;
            }
            let nt = g.op(&[t], F32, [hd, heads, n], true);
            let wt = w(g, name);
            g.op(&[nt, wt], F32, [hd, heads, n], true)
        };
        // q, then v, then k: the order build_attn expands them in (q, k, v for the windowed
        // caches' build_attn). A quantized cache's rows are rotated first (`rot`).
        let q_mm = proj(&mut g, "attn_q", q);
        let q_3d = g.view(q_mm, &[]);
        let q_n = head_norm(&mut g, q_3d, h, "attn_q_norm");
        let mut q_rope = g.op(&[q_n, pos], F32, [hd, h, n], true);
        if gemma {
            q_rope = g.op(&[q_rope], F32, [hd, h, n], true);
        }
        let q_rope = rotated(&mut g, q_rope, k_rot, s.k_rot, h * hd * n);
        let v_chain = |g: &mut Graph| {
            let v_mm = proj(g, "attn_v", kv);
            let v_3d = g.view(v_mm, &[]);
            rotated(g, v_3d, v_rot, s.v_rot, kv * n)
        };
        let k_chain = |g: &mut Graph| {
            let k_mm = proj(g, "attn_k", kv);
            let k_3d = g.view(k_mm, &[]);
            let k_n = head_norm(g, k_3d, hkv, "attn_k_norm");
            let k_rope = g.op(&[k_n, pos], F32, [hd, hkv, n], true);
            rotated(g, k_rope, k_rot, s.k_rot, kv * n)
        };
        let (v_3d, k_rope) = if windowed {
            let k = k_chain(&mut g);
            (v_chain(&mut g), k)
        } else {
            let v = v_chain(&mut g);
            (v, k_chain(&mut g))
        };
        // The cache is this layer's device's (llama.cpp offloads it with the layer).
        let k_cache = g.cache(b, s.k_row * cells);
        let v_cache = g.cache(b, s.v_row * cells);
        let k_2d = g.view(k_rope, &[]);
        g.view(k_cache, &[k_2d, k_idxs]);
        let v_2d = g.view(v_3d, &[]);
        g.view(v_cache, &[v_2d, v_idxs]);
        let k_view = g.view(k_cache, &[]);
        let v_view = g.view(v_cache, &[]);
        let q_4d = g.view(q_rope, &[]);
        let q_perm = g.view(q_4d, &[]);
        let k_perm = g.view(k_view, &[]);
        let v_perm = g.view(v_view, &[]);
        // gpt-oss's sinks: a weight the attention reads last (its backend follows the weight's).
        let sinks: Vec<usize> = if oss { vec![w(&mut g, "attn_sinks")] } else { vec![] };
        let attn = if s.flash {
            let fa = g.op(&[&[q_perm, k_perm, v_perm, mask][..], &sinks].concat(), F32, [hd, h, n], false);
            g.tensors[fa].fa_cells = hd * hkv * cells;
            g.view(fa, &[])
        } else {
            let kq = g.op(&[k_perm, q_perm], F32, [cells, n, h], false);
            let sm = g.op(&[&[kq, mask][..], &sinks].concat(), F32, [cells, n, h], true);
            let kqv = g.op(&[v_perm, sm], F32, [hd, n, h], false);
            let perm = g.view(kqv, &[]);
            g.op(&[perm], F32, [hd * h, n, 1], false)
        };
        let attn = rotated(&mut g, attn, v_rot, s.v_rot, hd * h * n);
        let wo = w(&mut g, "attn_output");
        let mut cur = g.op(&[wo, attn], F32, [e, n, 1], false);
        if oss {
            let wo_b = w(&mut g, "attn_output.bias");
            cur = g.op(&[cur, wo_b], F32, [e, n, 1], true);
        }
        let mut res = inp_sa;
        // The last layer goes on with the outputs' rows only (gpt-oss's after it).
        let last = il == layers - 1 && !oss;
        let m = if last { no } else { n };
        if last {
            cur = g.op(&[cur, out_ids], F32, [e, m, 1], false);
        }
        if gemma {
            cur = post_norm(&mut g, &w, cur, m, e, "post_attention_norm");
        }
        // ggml visits the sum's first source before its second: the residual's rows after the
        // attention's (and its norm).
        if last {
            res = g.op(&[inp_sa, out_ids], F32, [e, m, 1], false);
        }
        let ffn_inp = g.op(&[cur, res], F32, [e, m, 1], true);
        let norm = g.op(&[ffn_inp], F32, [e, m, 1], true);
        let wn = w(&mut g, if oss { "post_attention_norm" } else { "ffn_norm" });
        let cur = g.op(&[norm, wn], F32, [e, m, 1], true);
        let out = match cfg.experts() {
            Some(x) if oss => experts_oss(&mut g, &w, cur, m, e, x),
            Some(x) => experts(&mut g, &w, cur, m, e, x),
            None => {
                let (wg, wu, wd) = (w(&mut g, "ffn_gate"), w(&mut g, "ffn_up"), w(&mut g, "ffn_down"));
                let gate = g.op(&[wg, cur], F32, [ff, m, 1], false);
                let up = g.op(&[wu, cur], F32, [ff, m, 1], false);
                let glu = g.op(&[gate, up], F32, [ff, m, 1], false);
                g.op(&[wd, glu], F32, [e, m, 1], false)
            }
        };
        let out = if gemma { post_norm(&mut g, &w, out, m, e, "post_ffw_norm") } else { out };
        inp_l = g.op(&[out, ffn_inp], F32, [e, m, 1], true);
    }
    if oss {
        inp_l = g.op(&[inp_l, out_ids], F32, [e, no, 1], false);
    }
    let norm = g.op(&[inp_l], F32, [e, no, 1], true);
    let (home, bytes) = weight(layers, "output_norm");
    let wn = g.weight(home, bytes);
    let result_norm = g.op(&[norm, wn], F32, [e, no, 1], true);
    let (home, bytes) = weight(layers, "output");
    let out = g.weight(home, bytes);
    let logits = g.op(&[out, result_norm], F32, [vocab, no, 1], false);
    g.tensors[result_norm].output = true;
    g.tensors[logits].output = true;
    g
}
