//! The check's summary, read before its hundreds of rows: per kind of check, how many were made,
//! how many landed within the tolerance, and the worst miss with the case it came from.

use super::checks::{LimitCheck, StepCheck};
use super::tables::col;
use crate::error::Result;
use crate::model::Precision;
use polars::prelude::*;

/// The bar for the weights, the allocated bytes and the peaks (`tests/estimate_check.rs`).
pub const BYTES_TOLERANCE_PCT: f64 = 3.0;

/// The bar for a bisected longest context: 2 %, or one bisection step where that is coarser.
pub const CONTEXT_TOLERANCE_PCT: f64 = 2.0;

/// One kind of check, summed up.
struct Line {
    check: &'static str,
    errors: Vec<(f64, f64, String)>,
    tolerance: &'static str,
    note: &'static str,
}

/// (error %, the tolerance for this case %, the case named) of each check, by kind.
fn lines(weights: &[(String, Precision, f64, f64)], steps: &[StepCheck], limits: &[LimitCheck]) -> Vec<Line> {
    let step_name = |s: &StepCheck| {
        format!("{}: {} {} {}, {} × {} tokens", s.file, s.precision, s.logits.name(), s.attention, s.batch, s.seq)
    };
    let limit = |retried: bool| -> Vec<(f64, f64, String)> {
        limits
            .iter()
            .filter(|l| l.retried == retried)
            .map(|l| {
                let step = 100.0 * l.resolution as f64 / l.max_context as f64;
                (
                    l.err_pct(),
                    CONTEXT_TOLERANCE_PCT.max(step),
                    format!(
                        "{}: {} {} {} on {}, measured {} tokens, ledger {}",
                        l.file,
                        l.precision,
                        l.logits.name(),
                        l.attention,
                        l.card,
                        l.max_context,
                        l.predicted_max_context
                    ),
                )
            })
            .collect()
    };
    vec![
        Line {
            check: "weights after loading",
            errors: weights
                .iter()
                .map(|(f, p, m, pr)| (100.0 * (pr - m) / m, BYTES_TOLERANCE_PCT, format!("{f}: {p}")))
                .collect(),
            tolerance: "3 %",
            note: "the tensors' bytes (Q4: the GGUF blocks)",
        },
        Line {
            check: "allocated after a prefill or batch step",
            errors: steps.iter().map(|s| (s.allocated_err_pct(), BYTES_TOLERANCE_PCT, step_name(s))).collect(),
            tolerance: "3 %",
            note: "weights, KV cache, logits, Q4's matmul buffer",
        },
        Line {
            check: "peak of a prefill or batch step",
            errors: steps.iter().map(|s| (s.peak_err_pct(), BYTES_TOLERANCE_PCT, step_name(s))).collect(),
            tolerance: "3 %",
            note: "the transient counted tensor by tensor",
        },
        Line {
            check: "longest context, OOM retried after a trim",
            errors: limit(true),
            tolerance: "2 % or one bisection step",
            note: "the ledger's own bisection, the pool's 32 MiB chunks counted",
        },
        Line {
            check: "longest context, runs before the retry",
            errors: limit(false),
            tolerance: "2 % or one bisection step",
            note: "misses by design: the pool's mapped memory, not the live bytes, hit the card",
        },
    ]
}

/// The summary table: one row per kind of check that has any.
pub fn table(
    weights: &[(String, Precision, f64, f64)],
    steps: &[StepCheck],
    limits: &[LimitCheck],
) -> Result<DataFrame> {
    let lines: Vec<Line> = lines(weights, steps, limits).into_iter().filter(|l| !l.errors.is_empty()).collect();
    let worst = |l: &Line| l.errors.iter().max_by(|a, b| a.0.abs().total_cmp(&b.0.abs())).cloned();
    Ok(df!(
        col::CHECK => lines.iter().map(|l| l.check).collect::<Vec<_>>(),
        col::CHECKS => lines.iter().map(|l| l.errors.len() as u32).collect::<Vec<_>>(),
        col::WITHIN => lines.iter().map(|l| l.errors.iter().filter(|(e, tol, _)| e.abs() <= *tol + 1e-9).count() as u32).collect::<Vec<_>>(),
        col::TOLERANCE => lines.iter().map(|l| l.tolerance).collect::<Vec<_>>(),
        col::WORST_ERR_PCT => lines.iter().map(|l| worst(l).map(|w| w.0)).collect::<Vec<_>>(),
        col::WORST_CASE => lines.iter().map(|l| worst(l).map(|w| w.2).unwrap_or_default()).collect::<Vec<_>>(),
        col::NOTE => lines.iter().map(|l| l.note).collect::<Vec<_>>(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Logits;

    fn step(file: &str, allocated: f64, predicted: f64) -> StepCheck {
        StepCheck {
            file: file.into(),
            precision: Precision::Bf16,
            logits: Logits::All,
            attention: "bounded".into(),
            seq: 1024,
            batch: 1,
            allocated_mib: allocated,
            predicted_allocated_mib: predicted,
            peak_mib: allocated,
            predicted_peak_mib: allocated,
            transient_mib: 0.0,
            predicted_transient_mib: 0.0,
            peak_at: "mlp",
        }
    }

    #[test]
    fn the_summary_counts_the_checks_within_tolerance_and_names_the_worst() {
        let steps = [
            step("a/kv_prefill.csv", 100.0, 101.0),
            step("b/kv_prefill.csv", 100.0, 95.0),
            step("c/kv_prefill.csv", 100.0, 99.0),
        ];
        let df = table(&[], &steps, &[]).unwrap();
        assert_eq!(df.height(), 2, "no weights or limits: only the step rows");
        let checks = crate::frame::strings(&df, col::CHECK).unwrap();
        let row = checks.iter().position(|c| c.starts_with("allocated")).unwrap();
        assert_eq!(crate::frame::floats(&df, col::CHECKS).unwrap()[row], 3.0);
        assert_eq!(crate::frame::floats(&df, col::WITHIN).unwrap()[row], 2.0, "the 5 % miss is outside 3 %");
        assert_eq!(crate::frame::floats(&df, col::WORST_ERR_PCT).unwrap()[row], -5.0);
        assert!(
            crate::frame::strings(&df, col::WORST_CASE).unwrap()[row].starts_with("b/kv_prefill.csv"),
            "the worst is named"
        );
    }
}
