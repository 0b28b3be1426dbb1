//! llama.cpp's own buffers, launch by launch (`scripts/reference/llama_memory.sh` wrote
//! `launches.csv` and one log per launch), beside `estimate --engine llama.cpp` for the same
//! model and flags: the model, the KV cache and the compute buffer on the GPU as llama.cpp's log
//! prints them, and the process's device memory as nvidia-smi listed it.

use super::runs::find;
use crate::error::{LabError, Result};
use crate::estimate::llamacpp::process::{self, Beyond};
use crate::estimate::llamacpp::{self, Buffers, CacheType, Launch};
use crate::frame::{floats, strings};
use crate::model::gguf::recipe::FileType;
use crate::model::gguf::writer::{plan, FileTypes};
use crate::model::DecoderConfig;
use crate::session::run_folder::read_csv;
use clap::ValueEnum;
use std::path::Path;

const MIB: f64 = (1u64 << 20) as f64;

/// One GPU of a launch over several: its buffers as its log lines give them (MiB), as predicted,
/// and nvidia-smi's largest figure for the process on it.
#[derive(Debug, Clone)]
pub struct DeviceCheck {
    pub measured: [f64; 3],
    pub predicted: Buffers,
    pub smi_mib: f64,
}

/// One launch: what llama.cpp printed beside the estimate.
#[derive(Debug, Clone)]
pub struct LaunchCheck {
    pub file: String,
    pub preset: String,
    pub ftype: FileType,
    pub launch: Launch,
    /// The GPU's buffers in MiB as llama.cpp's log gives them (two decimals).
    pub measured: [f64; 3],
    pub predicted: Buffers,
    /// nvidia-smi's largest figure for the process, MiB.
    pub smi_mib: f64,
    /// The prompt's tokens, as llama.cpp's log counts them.
    pub prompt: u64,
    /// What the process holds beyond the buffers, predicted for that prompt (on each GPU).
    pub beyond: Beyond,
    /// Each GPU of a launch over several (`-ts`); empty for one GPU.
    pub devices: Vec<DeviceCheck>,
}

impl LaunchCheck {
    pub fn measured_total(&self) -> f64 {
        self.measured.iter().sum()
    }

    pub fn predicted_total(&self) -> f64 {
        self.predicted.total() as f64 / MIB
    }

    pub fn err_mib(&self) -> f64 {
        self.predicted_total() - self.measured_total()
    }

    pub fn err_pct(&self) -> f64 {
        100.0 * self.err_mib() / self.measured_total()
    }

    /// What the process held beyond llama.cpp's buffers: the CUDA context, cuBLAS, its pools.
    pub fn outside_mib(&self) -> f64 {
        self.smi_mib - self.measured_total()
    }

    /// The whole process as nvidia-smi would list it: the buffers and what lies beyond them, on
    /// every GPU.
    pub fn predicted_smi_mib(&self) -> f64 {
        let gpus = self.devices.len().max(1) as u64;
        (self.predicted.total() + gpus * self.beyond.total()) as f64 / MIB
    }

    pub fn smi_err_mib(&self) -> f64 {
        self.predicted_smi_mib() - self.smi_mib
    }
}

/// The prompt's tokens a llama.cpp log counted ("prompt eval time = … / 3900 tokens").
pub fn prompt_tokens(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.contains("prompt eval time"))?;
    line.rsplit_once('/')?.1.split_whitespace().next()?.parse().ok()
}

/// The GPUs' model, KV and compute buffers (MiB) a llama.cpp log printed, added up, or None when
/// it printed no compute buffer (the launch failed before reserving).
pub fn parse_log(text: &str) -> Option<[f64; 3]> {
    Some(added(&parse_log_devices(text)?))
}

/// The GPUs' three buffers added up.
fn added(devices: &[[f64; 3]]) -> [f64; 3] {
    devices.iter().fold([0.0; 3], |a, d| [a[0] + d[0], a[1] + d[1], a[2] + d[2]])
}

/// Each GPU's model, KV and compute buffers (MiB), `CUDA0` first, as a llama.cpp log printed
/// them, or None when a GPU that holds buffers printed no compute buffer.
pub fn parse_log_devices(text: &str) -> Option<Vec<[f64; 3]>> {
    let mut sums: Vec<[f64; 3]> = Vec::new();
    let mut compute: Vec<Option<f64>> = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" buffer size =") else { continue };
        let Some(mib) = right.split_whitespace().next().and_then(|x| x.parse::<f64>().ok()) else { continue };
        let words: Vec<&str> = left.split_whitespace().collect();
        let [.., device, kind] = words[..] else { continue };
        let Some(d) = device.strip_prefix("CUDA").and_then(|n| n.parse::<usize>().ok()) else { continue };
        if d >= sums.len() {
            sums.resize(d + 1, [0.0; 3]);
            compute.resize(d + 1, None);
        }
        match kind {
            "model" => sums[d][0] += mib,
            "KV" => sums[d][1] += mib,
            // Printed once per reserve; the last one is the buffer kept.
            "compute" => compute[d] = Some(mib),
            _ => {}
        }
    }
    if sums.is_empty() {
        return None;
    }
    for (s, c) in sums.iter_mut().zip(compute) {
        s[2] = c?;
    }
    Some(sums)
}

/// Launch `id`'s log, as written or gzipped (the launches that printed their whole graph are
/// megabytes). The generated text in it is whatever the synthetic weights decode to: bytes, read
/// lossily.
fn read_log(logs: &Path, id: usize) -> std::io::Result<String> {
    use std::io::Read;
    let plain = logs.join(format!("launch-{id}.log"));
    let bytes = match std::fs::read(&plain) {
        Ok(b) => b,
        Err(_) => {
            let mut b = Vec::new();
            let f = std::fs::File::open(logs.join(format!("launch-{id}.log.gz")))?;
            flate2::read::GzDecoder::new(f).take(1 << 30).read_to_end(&mut b)?;
            b
        }
    };
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Every launch under `root` that finished, with its estimate.
pub fn launches(root: &Path) -> Result<Vec<LaunchCheck>> {
    let mut files = Vec::new();
    find(root, "launches.csv", &mut files);
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let dir = f.parent().unwrap_or(root);
        let df = read_csv(&f)?;
        let (preset, ty, fa, ctk, ctv) = (
            strings(&df, "preset")?,
            strings(&df, "type")?,
            strings(&df, "fa")?,
            strings(&df, "ctk")?,
            strings(&df, "ctv")?,
        );
        let (id, ctx, ngl, batch, ubatch, rc) = (
            floats(&df, "id")?,
            floats(&df, "ctx")?,
            floats(&df, "ngl")?,
            floats(&df, "batch")?,
            floats(&df, "ubatch")?,
            floats(&df, "rc")?,
        );
        // One figure per GPU, colon-separated, over several.
        let smi = strings(&df, "smi_peak_mib")?;
        // Grids since issue 68 name the tensors kept on the host (`--n-cpu-moe N`, `-ot PATTERN=CPU`)
        // and a windowed cache as large as the others (`--swa-full`).
        let optional = |name: &str| -> Result<Vec<String>> {
            if df.column(name).is_err() {
                return Ok(vec![String::new(); df.height()]);
            }
            strings(&df, name)
        };
        let (ncmoe, ot, swa, ts) = (optional("ncmoe")?, optional("ot")?, optional("swa")?, optional("ts")?);
        let file = f.strip_prefix(root).unwrap_or(&f).display().to_string();
        for i in 0..df.height() {
            if rc[i] != 0.0 {
                continue;
            }
            let bad = |what: &str| LabError::input(format!("{file} row {}: {what}", i + 1));
            let numbers = |s: &str, what: &str| -> Result<Vec<f64>> {
                s.split(':').filter(|x| !x.is_empty()).map(|x| x.trim().parse().map_err(|_| bad(what))).collect()
            };
            let tensor_split = numbers(&ts[i], "ts")?;
            let smi_gpus = numbers(&smi[i], "smi_peak_mib")?;
            let cache = |s: &str| CacheType::from_str(s, true).map_err(|_| bad(&format!("cache type {s}")));
            let count = |x: f64| (x.is_finite() && x >= 0.0 && x <= u32::MAX as f64).then_some(x as usize);
            let launch = Launch {
                ctx: count(ctx[i]).ok_or_else(|| bad("ctx"))?,
                gpu_layers: Some(count(ngl[i]).ok_or_else(|| bad("ngl"))?),
                flash: fa[i] == "on",
                cache_k: cache(&ctk[i])?,
                cache_v: cache(&ctv[i])?,
                batch: count(batch[i]).ok_or_else(|| bad("batch"))?,
                ubatch: count(ubatch[i]).ok_or_else(|| bad("ubatch"))?,
                // llama-completion reserves for every token of -b.
                outputs: None,
                n_cpu_moe: Some(&ncmoe[i])
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse().map_err(|_| bad("ncmoe")))
                    .transpose()?,
                cpu_moe: false,
                host_tensors: Some(&ot[i]).filter(|s| !s.is_empty()).cloned().into_iter().collect(),
                swa_full: swa[i] == "full",
                tensor_split,
            };
            let ftype = FileType::from_str(&ty[i], true).map_err(|_| bad(&format!("type {}", ty[i])))?;
            let id = count(id[i]).ok_or_else(|| bad("id"))?;
            let log = read_log(&dir.join("logs"), id).map_err(|e| bad(&format!("its log: {e}")))?;
            let Some(per_gpu) = parse_log_devices(&log) else { continue };
            let Some(prompt) = prompt_tokens(&log) else { continue };
            let cfg = DecoderConfig::preset(&preset[i])?;
            let tensors = plan(&cfg, FileTypes::Llama(ftype));
            let m = llamacpp::memory(&cfg, &tensors, &launch)?;
            let beyond = process::beyond(&cfg, &launch, llamacpp::mmq_weights(&tensors), prompt);
            let devices = if m.gpus.len() > 1 {
                if per_gpu.len() > m.gpus.len() || smi_gpus.len() != m.gpus.len() {
                    return Err(bad(&format!(
                        "{} GPUs in its log and {} in nvidia-smi's figures for a -ts of {}",
                        per_gpu.len(),
                        smi_gpus.len(),
                        m.gpus.len()
                    )));
                }
                m.gpus
                    .iter()
                    .enumerate()
                    .map(|(d, &predicted)| DeviceCheck {
                        measured: per_gpu.get(d).copied().unwrap_or_default(),
                        predicted,
                        smi_mib: smi_gpus[d],
                    })
                    .collect()
            } else {
                vec![]
            };
            out.push(LaunchCheck {
                file: format!("{file}#{id}"),
                preset: preset[i].clone(),
                ftype,
                launch,
                measured: added(&per_gpu),
                predicted: m.gpu,
                smi_mib: smi_gpus.iter().sum(),
                prompt,
                beyond,
                devices,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GPU's buffers are summed from llama.cpp's own lines; the host's and pinned buffers are
    /// not the GPU's; the last compute line is the buffer kept.
    #[test]
    fn a_log_gives_the_gpus_three_buffers() {
        let log = "load_tensors:   CPU_Mapped model buffer size =   292.36 MiB\n\
                   load_tensors:        CUDA0 model buffer size =  4168.09 MiB\n\
                   llama_kv_cache:      CUDA0 KV buffer size =   224.00 MiB\n\
                   sched_reserve:      CUDA0 compute buffer size =   300.00 MiB\n\
                   sched_reserve:  CUDA_Host compute buffer size =    15.01 MiB\n\
                   sched_reserve:      CUDA0 compute buffer size =   304.00 MiB\n";
        assert_eq!(parse_log(log), Some([4168.09, 224.0, 304.0]));
        assert_eq!(parse_log("load_tensors: CUDA0 model buffer size = 1.00 MiB\n"), None);
    }

    /// Over two GPUs each GPU's lines are its own, its last compute line the one kept.
    #[test]
    fn a_log_over_two_gpus_gives_each_gpus_buffers() {
        let log = "load_tensors:        CUDA0 model buffer size =  4000.50 MiB\n\
                   load_tensors:        CUDA1 model buffer size =  3000.25 MiB\n\
                   llama_kv_cache:      CUDA0 KV buffer size =   240.00 MiB\n\
                   llama_kv_cache:      CUDA1 KV buffer size =   208.00 MiB\n\
                   sched_reserve:      CUDA0 compute buffer size =   320.00 MiB\n\
                   sched_reserve:      CUDA1 compute buffer size =   410.00 MiB\n\
                   sched_reserve:  CUDA_Host compute buffer size =    40.00 MiB\n\
                   sched_reserve:      CUDA1 compute buffer size =   420.00 MiB\n";
        assert_eq!(parse_log_devices(log), Some(vec![[4000.5, 240.0, 320.0], [3000.25, 208.0, 420.0]]));
        assert_eq!(parse_log(log), Some([7000.75, 448.0, 740.0]));
        // A GPU with buffers and no compute line: the launch failed before reserving.
        assert_eq!(parse_log_devices(&log.replace("CUDA0 compute", "CUDA2 compute")), None);
    }

    #[test]
    fn a_log_gives_the_prompts_tokens() {
        let log = "common_perf_print: prompt eval time =     433.35 ms /  3900 tokens (    0.11 ms per token)\n";
        assert_eq!(prompt_tokens(log), Some(3900));
        assert_eq!(prompt_tokens("no timing here"), None);
    }
}
