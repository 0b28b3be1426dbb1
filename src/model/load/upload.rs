//! Safetensors to the GPU at the pace of the disk and the PCIe link. candle's path maps the file,
//! copies a tensor into a CPU tensor on one thread, then copies it from pageable memory to the
//! device, one step after the other (20 % of the floor measured on an H200, warm). Here each
//! tensor's bytes are read with positional reads on every core (a cold file gets many requests in
//! flight) into one of two pinned staging buffers, and the DMA engine copies one buffer to the
//! device while the next piece is read into the other.

use crate::error::{LabError, Result};
use candle_core::DType;
use rayon::prelude::*;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Where one tensor's bytes lie in a checkpoint's files.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub file: usize,
    pub offset: u64,
    pub len: usize,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

/// The dense tensors of safetensors `files` by name (types the lab does not load are left out:
/// candle's reader refuses them with their name). Headers are read through the safetensors crate.
pub fn index(files: &[PathBuf]) -> Result<HashMap<String, Entry>> {
    let mut out = HashMap::new();
    for (i, path) in files.iter().enumerate() {
        let file = File::open(path)?;
        // SAFETY: mapped read-only for the header's parse only; the lab never writes the file.
        let map = unsafe { memmap2::Mmap::map(&file) }?;
        let (n, meta) = safetensors::SafeTensors::read_metadata(&map)
            .map_err(|e| LabError::input(format!("{}: not a readable safetensors file ({e})", path.display())))?;
        let data = 8 + n as u64;
        for (name, info) in meta.tensors() {
            let dtype = match info.dtype {
                safetensors::Dtype::BF16 => DType::BF16,
                safetensors::Dtype::F16 => DType::F16,
                safetensors::Dtype::F32 => DType::F32,
                _ => continue,
            };
            let (start, end) = info.data_offsets;
            out.insert(
                name,
                Entry { file: i, offset: data + start as u64, len: end - start, dtype, shape: info.shape.clone() },
            );
        }
    }
    Ok(out)
}

/// Reads `buf.len()` bytes at `offset` of `file` in pieces of at least 1 MiB, on rayon's threads.
pub fn read_parallel(file: &File, offset: u64, buf: &mut [u8]) -> Result<()> {
    const MIN_PIECE: usize = 1 << 20;
    let threads = rayon::current_num_threads().max(1);
    let piece = buf.len().div_ceil(threads).max(MIN_PIECE).next_multiple_of(4096);
    buf.par_chunks_mut(piece)
        .enumerate()
        .try_for_each(|(i, p)| file.read_exact_at(p, offset + (i * piece) as u64))
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                LabError::input("a safetensors file ends before a tensor it lists (truncated?)")
            } else {
                e.into()
            }
        })
}

#[cfg(feature = "cuda")]
pub use gpu::Uploader;

#[cfg(feature = "cuda")]
mod gpu {
    use super::{read_parallel, Entry};
    use crate::error::{LabError, Result};
    use crate::memory::cuda_copy::{self, Pinned};
    use candle_core::cuda_backend::cudarc::driver::{result, sys, CudaEvent, CudaStream};
    use candle_core::cuda_backend::CudaDevice;
    use candle_core::Tensor;
    use std::fs::File;
    use std::sync::Arc;

    fn err(e: impl std::fmt::Debug) -> LabError {
        LabError::other(format!("{e:?}"))
    }

    /// Two pinned staging buffers and the events saying their last copy has landed. The copies go
    /// on candle's own stream, after the allocation of the tensor they fill and before any kernel
    /// that reads it, so nothing else needs ordering.
    pub struct Uploader {
        dev: CudaDevice,
        stream: Arc<CudaStream>,
        staging: [Pinned; 2],
        landed: [CudaEvent; 2],
        next: usize,
        chunk: usize,
    }

    impl Uploader {
        /// `chunk`: bytes of each staging buffer (the loader uses 64 MiB: 128 MiB pinned in all).
        pub fn new(dev: &CudaDevice, chunk: usize) -> Result<Self> {
            let stream = dev.cuda_stream();
            let ctx = stream.context();
            let event = || ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)).map_err(err);
            let landed = [event()?, event()?];
            // A fresh event counts as landed: record both now, on an idle stream.
            for e in &landed {
                e.record(&stream).map_err(err)?;
            }
            Ok(Self {
                dev: dev.clone(),
                staging: [Pinned::new(dev, chunk)?, Pinned::new(dev, chunk)?],
                stream,
                landed,
                next: 0,
                chunk,
            })
        }

        /// The tensor `e` of `file` on the device, read piece by piece into the staging buffers.
        pub fn tensor(&mut self, file: &File, e: &Entry) -> Result<Tensor> {
            let elems: usize = e.shape.iter().product();
            if elems * e.dtype.size_in_bytes() != e.len {
                return Err(LabError::input(format!(
                    "a safetensors entry of {} bytes does not hold {:?} of {:?}",
                    e.len, e.shape, e.dtype
                )));
            }
            let t = cuda_copy::uninit(&self.dev, e.dtype, e.shape.clone())?;
            let (dst, _) = cuda_copy::device_ptr(&t, &self.stream)?;
            let mut done = 0;
            while done < e.len {
                let n = self.chunk.min(e.len - done);
                let b = self.next;
                self.next = 1 - b;
                // The buffer's previous copy must have left it before it is overwritten.
                self.landed[b].synchronize().map_err(err)?;
                let buf = &mut self.staging[b].as_mut_slice()?[..n];
                read_parallel(file, e.offset + done as u64, buf)?;
                // SAFETY: `dst` holds the tensor's `e.len` bytes; the pinned buffer outlives the
                // copy (its event is waited for before reuse and on drop).
                unsafe { result::memcpy_htod_async(dst + done as u64, &*buf, self.stream.cu_stream()) }.map_err(err)?;
                self.landed[b].record(&self.stream).map_err(err)?;
                done += n;
            }
            Ok(t)
        }
    }

    impl Drop for Uploader {
        fn drop(&mut self) {
            // Copies still queued read the pinned buffers about to be freed.
            for e in &self.landed {
                let _ = e.synchronize();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    #[test]
    fn parallel_reads_return_each_tensor_as_candle_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let dev = Device::Cpu;
        // Two files; tensors of a few MiB so the reads come in several pieces.
        let a = Tensor::arange(0f32, (3 << 20) as f32, &dev).unwrap().reshape((3 << 10, 1 << 10)).unwrap();
        let b = Tensor::arange(0f32, 5000., &dev).unwrap().to_dtype(DType::BF16).unwrap();
        let c = Tensor::ones((7, 3), DType::F16, &dev).unwrap();
        let files = vec![dir.path().join("m-1.safetensors"), dir.path().join("m-2.safetensors")];
        candle_core::safetensors::save(
            &HashMap::from([("a".to_string(), a.clone()), ("b".to_string(), b.clone())]),
            &files[0],
        )
        .unwrap();
        candle_core::safetensors::save(&HashMap::from([("c".to_string(), c.clone())]), &files[1]).unwrap();
        let idx = index(&files).unwrap();
        assert_eq!(idx.len(), 3);
        for (name, want) in [("a", &a), ("b", &b), ("c", &c)] {
            let e = &idx[name];
            assert_eq!((e.dtype, e.shape.as_slice()), (want.dtype(), want.dims()), "{name}");
            let mut buf = vec![0u8; e.len];
            read_parallel(&File::open(&files[e.file]).unwrap(), e.offset, &mut buf).unwrap();
            let got = Tensor::from_raw_buffer(&buf, e.dtype, &e.shape, &dev).unwrap();
            let diff = (got.to_dtype(DType::F32).unwrap() - want.to_dtype(DType::F32).unwrap())
                .unwrap()
                .abs()
                .unwrap()
                .sum_all()
                .unwrap();
            assert_eq!(diff.to_scalar::<f32>().unwrap(), 0.0, "{name}");
        }
        // A file cut inside a tensor's bytes: the header parse refuses it, in one line.
        let bytes = std::fs::read(&files[0]).unwrap();
        std::fs::write(&files[0], &bytes[..bytes.len() - 100]).unwrap();
        let e = index(&files).unwrap_err();
        assert!(e.to_string().contains("m-1.safetensors"), "{e}");
    }
}
