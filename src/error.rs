//! The lab's error type. An out-of-memory is a value (`LabError::Oom`) that carries what was asked
//! for and what memory looked like at that moment, so a stage can report it and the next one runs.

use crate::units::{fmt_bytes, grouped};

pub type Result<T, E = LabError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Bad input from the user: paths, configs, presets, cards, flags.
    #[error("{0}")]
    Input(String),
    /// A number outside what the lab accepts (a flag, a config value, a workload).
    #[error("{what} = {value} is out of range: {allowed}")]
    OutOfRange { what: String, value: String, allowed: String },
    /// A token id at or past the model's vocabulary: checked on the host, before any kernel
    /// (on a GPU the embedding's device-side assert would poison the CUDA context).
    #[error("token id {id} is outside the vocabulary ({} tokens)", grouped(*.vocab as u64))]
    TokenOutOfVocab { id: u64, vocab: usize },
    /// A file shorter than its own header says.
    #[error("{path}: truncated: {have} of {need} bytes")]
    Truncated { path: String, have: u64, need: u64 },
    /// Logits holding NaN or an infinity: generation stops at the step named instead of
    /// producing ids from them; `weight` names the first weight holding one, where it was found.
    #[error("the logits of {step} hold NaN or infinity{}: generation stopped", .weight.as_ref().map(|w| format!(" (the weight {w} holds NaN or infinity)")).unwrap_or_default())]
    NonFinite { step: String, weight: Option<String> },
    /// A model or workload whose byte counts the lab cannot represent.
    #[error("{0}")]
    TooLarge(String),
    #[error("{}", .0.headline())]
    Oom(Box<OomReport>),
    /// Something the machine cannot do (no CUDA built in, no GPU, a card larger than the GPU).
    #[error("{0}")]
    Unsupported(String),
    #[error("candle: {}", cause(.0))]
    Candle(candle_core::Error),
    /// Ctrl-C: the run stops after saving what finished.
    #[error("interrupted")]
    Interrupted,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Other(String),
}

/// What an out-of-memory looked like: the request that failed (when the allocator hook saw it),
/// the memory counters and the memory summary at that moment.
#[derive(Debug, Clone, Default)]
pub struct OomReport {
    /// Bytes of the allocation that failed; `None` when no hook saw it.
    pub request_bytes: Option<u64>,
    /// The raw message of the backend.
    pub message: String,
    /// What the lab was doing ("load model.layers.23.mlp.up_proj.weight", "prefill 32768").
    pub during: String,
    /// The counters when the probe caught it (`memory::MemoryProbe::capture`).
    pub at: Option<MemoryAtFailure>,
    pub summary: String,
}

/// The memory counters at a failure, in bytes: the probe's snapshot as the error carries it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MemoryAtFailure {
    pub t_s: f64,
    pub allocated: u64,
    pub reserved: u64,
    pub peak: u64,
    pub reserved_peak: u64,
    pub device_used: Option<u64>,
    pub device_total: Option<u64>,
}

impl MemoryAtFailure {
    /// Device memory outside the allocator's pool (CUDA context, modules).
    pub fn outside_pool(&self) -> Option<u64> {
        self.device_used.map(|u| u.saturating_sub(self.reserved))
    }

    /// What the pool could have had at most: the card less what sits outside the pool.
    pub fn pool_capacity(&self) -> Option<u64> {
        self.device_total.map(|t| t.saturating_sub(self.outside_pool().unwrap_or(0)))
    }
}

impl OomReport {
    pub fn headline(&self) -> String {
        let req = match self.request_bytes {
            Some(b) => format!("tried to allocate {}", fmt_bytes(b)),
            None => "allocation size unknown".into(),
        };
        let during = if self.during.is_empty() { String::new() } else { format!(" during {}", self.during) };
        format!("out of memory{during}: {req} ({})", self.message)
    }
}

impl LabError {
    pub fn input(msg: impl Into<String>) -> Self {
        Self::Input(msg.into())
    }

    /// `what = value is out of range: allowed`.
    pub fn out_of_range(what: impl Into<String>, value: impl std::fmt::Display, allowed: impl Into<String>) -> Self {
        Self::OutOfRange { what: what.into(), value: value.to_string(), allowed: allowed.into() }
    }

    /// The user's mistake (exit code 2), as opposed to the machine's or the lab's.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            Self::Input(_)
                | Self::OutOfRange { .. }
                | Self::TokenOutOfVocab { .. }
                | Self::Truncated { .. }
                | Self::TooLarge(_)
                | Self::NonFinite { .. }
        )
    }

    pub fn other(e: impl std::fmt::Display) -> Self {
        Self::Other(e.to_string())
    }

    /// Names what the lab was doing when an OOM happened; other errors pass through.
    pub fn during(mut self, what: impl Into<String>) -> Self {
        if let Self::Oom(r) = &mut self {
            if r.during.is_empty() {
                r.during = what.into();
            }
        }
        self
    }
}

/// candle reports CUDA OOM as a driver error inside a boxed error: match its text.
pub fn candle_is_oom(e: &candle_core::Error) -> bool {
    let s = format!("{e:?}");
    s.contains("CUDA_ERROR_OUT_OF_MEMORY") || s.contains("out of memory")
}

/// A candle error's message on one line, without the backtrace candle attaches when
/// RUST_BACKTRACE is set (its frames are `<unknown>` in a stripped binary).
pub fn cause(e: &candle_core::Error) -> String {
    use candle_core::Error as E;
    match e {
        E::WithBacktrace { inner, .. } => cause(inner),
        E::Context { inner, context } => format!("{context}: {}", cause(inner)),
        E::WithPath { inner, path } => format!("{}: {}", path.display(), cause(inner)),
        other => other.to_string().lines().next().unwrap_or_default().to_string(),
    }
}

impl From<candle_core::Error> for LabError {
    fn from(e: candle_core::Error) -> Self {
        if candle_is_oom(&e) {
            LabError::Oom(Box::new(OomReport { message: "CUDA_ERROR_OUT_OF_MEMORY".into(), ..Default::default() }))
        } else {
            LabError::Candle(e)
        }
    }
}

impl From<polars::error::PolarsError> for LabError {
    fn from(e: polars::error::PolarsError) -> Self {
        LabError::Other(format!("polars: {e}"))
    }
}

impl From<serde_json::Error> for LabError {
    fn from(e: serde_json::Error) -> Self {
        LabError::Other(format!("json: {e}"))
    }
}
