//! The process's own context on CPU: what libraries keep after their first use, made before a
//! scaled card starts counting (`Session::open`).

use crate::error::Result;
use crate::frame::console_columns;
use crate::memory::MemoryProbe;
use crate::model::{self, ModelSource, Precision, SourceOptions};
use candle_core::Device;
use polars::prelude::SerWriter;

/// What the process keeps after its first table and its first generation, made before a scaled
/// card starts counting, so it is the context outside the card (as a GPU's CUDA context and
/// library handles are outside its free memory) and not a leak inside it: polars' CSV writer's
/// buffers (8 MiB), the gemm library's per-thread buffers (0.5 MiB a thread), caches made on a
/// first generation. The model is loaded in BF16, generates a few tokens and is dropped.
pub fn warm(source: &ModelSource, opts: &SourceOptions, probe: &MemoryProbe) -> Result<()> {
    let mut df = polars::df!("a" => [1.0f64, 2.0], "b" => ["x", "y"])?;
    polars::prelude::CsvWriter::new(std::io::sink()).finish(&mut df)?;
    let _ = console_columns(&df, "")?;
    // gemm's buffers grow with the product's shape up to its cache blocking: a large product per
    // dtype on this thread and on every worker thread takes each to its largest.
    let products = || -> Result<()> {
        for dtype in [candle_core::DType::F32, candle_core::DType::BF16, candle_core::DType::F16] {
            let a = candle_core::Tensor::ones((1024, 1024), dtype, &Device::Cpu)?;
            let _ = a.matmul(&a)?;
        }
        Ok(())
    };
    products()?;
    rayon::broadcast(|_| products()).into_iter().collect::<Result<Vec<()>>>()?;
    let lm = model::source::load(source, opts, Precision::Bf16, &Device::Cpu, probe, None)?;
    let cfg = model::GenerateConfig { max_new_tokens: 4, ..Default::default() };
    model::generate::generate_with(&lm.model, &[1, 2, 3, 4], &cfg, |_| ())?;
    Ok(())
}
