//! Launching the decoding step's kernels on candle's stream, plainly or as programmatic dependent
//! launches (compute 9.0). A layer's step is five of these kernels (q|k|v, the attention, o,
//! gate|up, down), 140 for Qwen2.5-7B's 28 layers, and between two of them the card drains the
//! first and starts the second. On an H200 the attention and the small
//! products cost 449 µs a step above their bytes (`data/results/h200/2026-11-28-decode-probe`).
//! Under a dependent launch the next kernel's blocks start while the last blocks of the one before
//! run, fetch into L2 what does not depend on it (a product's first round of weights), and wait
//! for it at `griddepcontrol.wait` (`PDL_WAIT` in `common.cuh`).
//!
//! `VRAM_LAB_PDL=1` asks for it; the default stays the plain launch until a same-call timing on a
//! GPU shows the gain (`scripts/gpu/decode_speed.sh`, CONFIGS). Without it the kernels are
//! compiled without the instructions (`defines`), as they were before dependent launches.

use crate::error::{LabError, Result};
use crate::memory::cuda::compute_capability;
use candle_core::cuda_backend::cudarc::driver::{result, sys, CudaFunction, DeviceRepr, LaunchConfig};
use candle_core::cuda_backend::CudaDevice;
use std::ffi::c_void;

/// What `VRAM_LAB_PDL` asks for: `1` dependent launches, `0` or unset plain ones.
fn requested() -> Result<bool> {
    match std::env::var("VRAM_LAB_PDL").as_deref() {
        Err(_) | Ok("0") => Ok(false),
        Ok("1") => Ok(true),
        Ok(other) => Err(LabError::input(format!("VRAM_LAB_PDL={other}: use 1 (dependent launches) or 0"))),
    }
}

/// What the step's kernel source starts with: `VRAM_LAB_PDL` defined when dependent launches are
/// asked for, so that only then are the waits, releases and prefetches of `common.cuh` compiled in.
pub fn defines() -> Result<&'static str> {
    Ok(if requested()? { "#define VRAM_LAB_PDL 1\n" } else { "" })
}

/// Whether the step's kernels on `dev` launch as dependent launches: asked for, and possible. A
/// card below 9.0 has no `griddepcontrol`, and a build for one compiles the kernels without it
/// (`target::arch`), so asking there is refused rather than ignored.
pub fn dependent(dev: &CudaDevice) -> Result<bool> {
    if !requested()? {
        return Ok(false);
    }
    let cap = compute_capability(dev);
    let built = super::target::arch(0);
    if cap.is_some_and(|(major, _)| major >= 9) && built == Some("compute_90") {
        return Ok(true);
    }
    Err(LabError::input(format!(
        "VRAM_LAB_PDL=1: dependent launches need compute 9.0 and a build for it (this device {cap:?}, kernels built for {})",
        built.unwrap_or("NVRTC's default")
    )))
}

/// A kernel's arguments, gathered as cudarc's launch builder gathers them (a pointer to each
/// value, borrowed for `'a`), for a launch with or without the dependent-launch attribute.
pub struct Launch<'a> {
    func: &'a CudaFunction,
    args: Vec<*mut c_void>,
}

impl<'a> Launch<'a> {
    pub fn new(func: &'a CudaFunction) -> Self {
        Self { func, args: Vec::with_capacity(16) }
    }

    /// The next argument: a device pointer (u64) or a scalar, borrowed until the launch.
    pub fn arg<T: DeviceRepr>(&mut self, value: &'a T) -> &mut Self {
        self.args.push(value as *const T as *mut c_void);
        self
    }

    /// Launches on `dev`'s stream, as a dependent launch when `dependent`.
    ///
    /// # Safety
    /// The arguments are the kernel's, in its order and types, and every pointer among them
    /// covers what the kernel reads and writes under `cfg`; with `dependent`, the kernel reads
    /// nothing an earlier kernel writes before its `griddepcontrol.wait` (`PDL_WAIT`).
    pub unsafe fn launch(&mut self, dev: &CudaDevice, cfg: LaunchConfig, dependent: bool) -> Result<()> {
        let stream = dev.cuda_stream();
        let err = |e| LabError::other(format!("kernel launch: {e:?}"));
        stream.context().bind_to_thread().map_err(err)?;
        let f = self.func.cu_function();
        if !dependent {
            // SAFETY: as the caller promises; the stream and function belong to dev's context.
            let (g, b) = (cfg.grid_dim, cfg.block_dim);
            return unsafe { result::launch_kernel(f, g, b, cfg.shared_mem_bytes, stream.cu_stream(), &mut self.args) }
                .map_err(err);
        }
        // SAFETY: an all-zero attribute value is valid (the union's padding); the one field set is
        // the one its id names.
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: as the caller promises; `config` and `attr` outlive the call, which copies them.
        unsafe { sys::cuLaunchKernelEx(&config, f, self.args.as_mut_ptr(), std::ptr::null_mut()) }.result().map_err(err)
    }
}
