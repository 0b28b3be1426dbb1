//! One `model(input_ids)` of transformers 5.17 (Qwen2, Qwen3, Llama, Mistral; SDPA attention; no
//! cache passed in, so a fresh DynamicCache; every position's logits), as the requests and frees
//! it makes of PyTorch's allocator, in order. Read off the allocator history of forwards on an
//! H200 (`scripts/reference/transformers_memory.py --trace-lens`): every alloc and free, line by
//! line of `modeling_qwen2.py` and its siblings; the sequences agree request for request.
//!
//! In BF16 and F16 SDPA runs a fused kernel (flash or cuDNN): its output and a few bytes. In F32
//! no fused kernel applies, so PyTorch's reference path materialises the attention: scores,
//! softmax and masks of heads × seq² each, which is why F32 long contexts run out first.

use crate::estimate::caching::{Caching, Oom};
use crate::model::DecoderConfig;

/// cuBLAS's workspace, taken from PyTorch's allocator at the first matrix product and kept:
/// PyTorch's default is 32 MiB on compute 9.0 and above (measured on the H200) and
/// `:4096:2:16:8` (2 × 4 MiB + 8 × 16 KiB) on older cards such as the RTX 4090.
pub const CUBLAS_WORKSPACE_HOPPER: u64 = 32 << 20;
pub const CUBLAS_WORKSPACE_OLDER: u64 = 2 * (4 << 20) + 8 * (16 << 10);

/// cuBLASLt's workspace for a product with a bias, taken at the first biased projection (Qwen2's
/// q_proj) and kept: 1 MiB in every trace of a Qwen2 model, in BF16 and F32.
pub const BIAS_WORKSPACE: u64 = 1 << 20;

/// What the process keeps once taken: cuBLAS's workspaces (`cublas_bytes` for the card's).
#[derive(Debug, Clone, Copy)]
pub struct Workspaces {
    pub cublas_bytes: u64,
    pub cublas: Option<u64>,
    pub bias: Option<u64>,
}

impl Workspaces {
    pub fn new(cublas_bytes: u64) -> Self {
        Self { cublas_bytes, cublas: None, bias: None }
    }
}

/// What a forward leaves behind: its logits and the cache's K and V per layer.
pub struct Output {
    pub handles: Vec<u64>,
}

/// The shapes one forward works on.
struct Shape {
    s: u64,
    b: u64,
    h: u64,
    heads: u64,
    kv_heads: u64,
    d: u64,
    inter: u64,
    vocab: u64,
    layers: usize,
    qk_norm: bool,
    bias: bool,
}

/// The allocator, and the requests made inside one fused call (SDPA): if one of them fails, the
/// others are freed as the error unwinds, while the tensors Python frames hold stay.
struct Run<'a> {
    a: &'a mut Caching,
    op: Vec<u64>,
}

impl Run<'_> {
    fn al(&mut self, bytes: u64) -> Result<u64, Oom> {
        let h = self.a.alloc(bytes).inspect_err(|_| self.unwind())?;
        self.op.push(h);
        Ok(h)
    }
    fn fr(&mut self, h: u64) {
        self.a.free(h);
    }
    /// Python-level tensors: no longer freed by an error's unwinding.
    fn settle(&mut self) {
        self.op.clear();
    }
    fn unwind(&mut self) {
        for h in std::mem::take(&mut self.op) {
            self.a.free(h);
        }
    }
    /// A Python line's tensor: alive while its frame is, error or not.
    fn py(&mut self, bytes: u64) -> Result<u64, Oom> {
        let h = self.al(bytes)?;
        self.settle();
        Ok(h)
    }
}

/// `Qwen2RMSNorm.forward` on `rows` × `width`: upcast, variance, rsqrt, scale, downcast.
fn rms_norm(r: &mut Run, sh: &Shape, rows: u64, width: u64) -> Result<u64, Oom> {
    let (n, b) = (rows * width, sh.b);
    let up = if b != 4 { Some(r.py(n * 4)?) } else { None };
    let pow = r.py(n * 4)?;
    let var = r.py(rows * 4)?;
    r.fr(pow);
    let eps = r.py(rows * 4)?;
    let rs = r.py(rows * 4)?;
    r.fr(eps);
    let scaled = r.py(n * 4)?;
    r.fr(rs);
    if let Some(up) = up {
        r.fr(up);
    }
    let down = if b != 4 { Some(r.py(n * b)?) } else { None };
    let out = r.py(n * b)?;
    if let Some(down) = down {
        r.fr(down);
    }
    r.fr(scaled);
    r.fr(var);
    Ok(out)
}

/// `apply_rotary_pos_emb` for one of q or k: x·cos + rotate_half(x)·sin, one expression whose
/// temporaries an error frees.
fn rope(r: &mut Run, sh: &Shape, heads: u64) -> Result<u64, Oom> {
    let n = sh.s * heads * sh.d * sh.b;
    r.settle();
    let cos = r.al(n)?;
    let half = r.al(n / 2)?;
    let rotated = r.al(n)?;
    r.fr(half);
    let sin = r.al(n)?;
    r.fr(rotated);
    let out = r.al(n)?;
    r.fr(cos);
    r.fr(sin);
    r.settle();
    Ok(out)
}

/// `sdpa_attention_forward`: the attention's output, laid out (seq, heads, d).
fn attention(r: &mut Run, sh: &Shape) -> Result<u64, Oom> {
    let (s, b, nh) = (sh.s, sh.b, sh.heads);
    let qkv = s * nh * sh.d * b;
    r.settle();
    if b != 4 {
        // Fused: the seed and offset of its generator, the output, a few bytes of state.
        let seed = r.al(8)?;
        let offset = r.al(8)?;
        let out = r.al(qkv)?;
        let state = r.al(256)?;
        r.fr(state);
        r.fr(seed);
        r.fr(offset);
        r.settle();
        return Ok(out);
    }
    // PyTorch's reference attention: q scaled, the causal mask built (bool, then as an additive
    // bias), K and V repeated to every head, scores, softmax, the rows' masks, then scores × V
    // and the transpose back.
    let q = r.al(qkv)?;
    let ones = r.al(s * s)?;
    let tril = r.al(s * s)?;
    r.fr(ones);
    let (x1, x2) = (r.al(4)?, r.al(4)?);
    let bias = r.al(s * s * b)?;
    r.fr(x1);
    r.fr(x2);
    r.fr(tril);
    let k = r.al(qkv)?;
    let v = r.al(qkv)?;
    let k_scaled = r.al(qkv)?;
    let scores = r.al(nh * s * s * b)?;
    r.fr(k_scaled);
    let softmax = r.al(nh * s * s * b)?;
    let masked = r.al(nh * s * s)?;
    let rows = r.al(nh * s)?;
    let any = r.al(4)?;
    r.fr(any);
    r.fr(rows);
    r.fr(masked);
    r.fr(scores);
    let heads_first = r.al(qkv)?;
    for t in [q, k, v, bias, softmax] {
        r.fr(t);
    }
    let out = r.al(qkv)?;
    r.fr(heads_first);
    r.settle();
    Ok(out)
}

/// One decoder layer; `input` is freed at its end unless it is the embedding (the model's frame
/// holds that one until the end).
fn layer(
    r: &mut Run,
    sh: &Shape,
    input: u64,
    keep_input: bool,
    cache: &mut Vec<u64>,
    ws: &mut Workspaces,
) -> Result<u64, Oom> {
    let (s, b, d) = (sh.s, sh.b, sh.d);
    let n1 = rms_norm(r, sh, s, sh.h)?;
    let (q, k) = if sh.qk_norm {
        let q0 = r.py(s * sh.heads * d * b)?;
        let q = rms_norm(r, sh, s * sh.heads, d)?;
        r.fr(q0);
        let k0 = r.py(s * sh.kv_heads * d * b)?;
        let k = rms_norm(r, sh, s * sh.kv_heads, d)?;
        r.fr(k0);
        (q, k)
    } else {
        let q = r.py(s * sh.heads * d * b)?;
        if sh.bias && ws.bias.is_none() {
            ws.bias = Some(r.py(BIAS_WORKSPACE)?);
        }
        (q, r.py(s * sh.kv_heads * d * b)?)
    };
    let v = r.py(s * sh.kv_heads * d * b)?;
    let qr = rope(r, sh, sh.heads)?;
    let kr = rope(r, sh, sh.kv_heads)?;
    r.fr(q);
    r.fr(k);
    // DynamicCache.update on an empty cache: torch.cat copies K and V.
    cache.push(r.py(s * sh.kv_heads * d * b)?);
    cache.push(r.py(s * sh.kv_heads * d * b)?);
    r.fr(kr);
    r.fr(v);
    let o = attention(r, sh)?;
    let proj = r.py(s * sh.h * b)?;
    r.fr(o);
    r.fr(qr);
    r.fr(n1);
    let h1 = r.py(s * sh.h * b)?;
    r.fr(proj);
    let n2 = rms_norm(r, sh, s, sh.h)?;
    // down_proj(act_fn(gate_proj(x)) * up_proj(x)): one expression, its temporaries freed by an
    // error (Qwen3-8B's OOM at 16,384 tokens held 768 MiB less than a frame would keep).
    let wide = s * sh.inter * b;
    let gate = r.al(wide)?;
    let act = r.al(wide)?;
    r.fr(gate);
    let up = r.al(wide)?;
    let prod = r.al(wide)?;
    r.fr(act);
    r.fr(up);
    let down = r.al(s * sh.h * b)?;
    r.fr(prod);
    r.settle();
    r.fr(n2);
    let out = r.py(s * sh.h * b)?;
    r.fr(down);
    r.fr(h1);
    if !keep_input {
        r.fr(input);
    }
    Ok(out)
}

/// One forward over `seq` tokens in a dtype of `b` bytes. `ws` holds cuBLAS's workspaces once an
/// earlier forward has taken them.
pub fn forward(a: &mut Caching, cfg: &DecoderConfig, seq: usize, b: u64, ws: &mut Workspaces) -> Result<Output, Oom> {
    let sh = Shape {
        s: seq as u64,
        b,
        h: cfg.hidden_size as u64,
        heads: cfg.num_attention_heads as u64,
        kv_heads: cfg.num_key_value_heads as u64,
        d: cfg.head_dim() as u64,
        inter: cfg.intermediate_size as u64,
        vocab: cfg.vocab_size as u64,
        layers: cfg.num_hidden_layers,
        qk_norm: cfg.model_type.qk_norm(),
        bias: cfg.model_type.qkv_bias(),
    };
    let mut r = Run { a, op: Vec::new() };
    let s = sh.s;
    let embed = r.py(s * sh.h * b)?;
    // cache_position (int64), then position_ids from it.
    let positions0 = r.py(s * 8)?;
    let positions = r.py(s * 8)?;
    r.fr(positions0);
    // The rotary embedding in F32: positions as float, freqs (a matrix product), cat, cos, sin.
    let pos = r.py(s * 4)?;
    let freqs = r.py(s * sh.d / 2 * 4)?;
    if ws.cublas.is_none() {
        ws.cublas = Some(r.py(ws.cublas_bytes)?);
    }
    let emb = r.py(s * sh.d * 4)?;
    let mut trig = Vec::new();
    for _ in 0..2 {
        let raw = r.py(s * sh.d * 4)?;
        let scaled = r.py(s * sh.d * 4)?;
        r.fr(raw);
        trig.push(scaled);
    }
    let (cos, sin) = if b != 4 {
        let (c, si) = (r.py(s * sh.d * b)?, r.py(s * sh.d * b)?);
        for t in [pos, freqs, emb, trig[0], trig[1]] {
            r.fr(t);
        }
        (c, si)
    } else {
        for t in [pos, freqs, emb] {
            r.fr(t);
        }
        (trig[0], trig[1])
    };
    let mut cache = Vec::with_capacity(2 * sh.layers);
    let mut hidden = embed;
    for l in 0..sh.layers {
        hidden = layer(&mut r, &sh, hidden, l == 0, &mut cache, ws)?;
    }
    let normed = rms_norm(&mut r, &sh, s, sh.h)?;
    for t in [hidden, embed, positions, cos, sin] {
        r.fr(t);
    }
    let logits = r.py(s * sh.vocab * b)?;
    r.fr(normed);
    let mut handles = vec![logits];
    handles.extend(cache);
    Ok(Output { handles })
}
