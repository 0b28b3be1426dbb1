//! A training step on the lab's Qwen2: next-token cross-entropy over every position, the
//! gradients of every weight, and an AdamW update. The forward runs through the ops that record
//! their backward (`AttentionMode::Differentiable`) and a concatenating KV cache (the
//! preallocated one writes in place, outside the graph).
//!
//! Without checkpointing, candle keeps every tensor the forward made until the backward ends: an
//! op holds its inputs, so the loss holds the whole graph. With checkpointing, the forward keeps
//! only each layer's input and runs without a graph; the backward then recomputes one layer at a
//! time with a graph, back-propagates the gradient of its output (the surrogate
//! `sum(output · grad.detach())` has exactly that gradient) and frees it before the next layer.

pub mod optim;

use crate::error::{LabError, Result};
use crate::model::decoder::layer::Pass;
use crate::model::decoder::{Decoder, Logits};
use crate::model::layers::kv_cache::CacheKind;
use crate::model::AttentionMode;
use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor, Var};

/// The gradients of one step and its loss.
pub struct StepGrads {
    pub loss: f32,
    pub grads: GradStore,
}

/// `model` ready to train: trainable weights and the differentiable forward.
pub fn trainable(model: Decoder) -> Result<Decoder> {
    let mut model = model.into_trainable()?;
    model.attention = AttentionMode::Differentiable;
    Ok(model)
}

/// Inputs and targets of next-token prediction from `ids` ([batch, s + 1]).
pub fn shift(ids: &Tensor) -> Result<(Tensor, Tensor)> {
    let s = ids.dim(1)? - 1;
    Ok((ids.narrow(1, 0, s)?.contiguous()?, ids.narrow(1, 1, s)?.flatten_all()?))
}

/// Mean cross-entropy of `logits` (pieces [batch, rows, vocab]) against `target` ([batch · s]).
fn cross_entropy(model: &Decoder, pieces: Vec<Tensor>, target: &Tensor) -> Result<Tensor> {
    let logits = Tensor::cat(&pieces, 1)?;
    drop(pieces);
    let logits = logits.reshape(((), model.cfg.vocab_size))?.to_dtype(DType::F32)?;
    Ok(candle_nn::loss::cross_entropy(&logits, target)?)
}

fn check(model: &Decoder) -> Result<()> {
    if model.attention != AttentionMode::Differentiable {
        return Err(LabError::other("a training step needs the differentiable forward (train::trainable)"));
    }
    Ok(())
}

/// One forward and backward. `checkpoint`: keep only each layer's input, recompute in backward.
/// `forward_done` runs between the forward and the backward (where a caller reads memory).
/// Only the weights' gradients are returned: candle's store also holds gradients of constants
/// the graph used (see `estimate::training::constant_grads_layer`), dropped here.
pub fn gradients(
    model: &Decoder,
    input: &Tensor,
    target: &Tensor,
    checkpoint: bool,
    forward_done: &mut dyn FnMut(),
) -> Result<StepGrads> {
    check(model)?;
    let mut step = if checkpoint {
        checkpointed(model, input, target, forward_done)?
    } else {
        let (b, s) = input.dims2()?;
        let mut cache = model.new_cache_of(CacheKind::Concat, b, s)?;
        let loss = cross_entropy(model, model.forward(input, &mut cache, Logits::All)?, target)?;
        drop(cache);
        forward_done();
        let grads = loss.backward()?;
        StepGrads { loss: loss.to_scalar::<f32>()?, grads }
    };
    let mut kept = GradStore::default();
    let weights: Vec<Tensor> = model.vars()?.iter().map(|v| v.as_tensor().clone()).collect();
    merge(&mut kept, &mut step.grads, &weights)?;
    step.grads = kept;
    Ok(step)
}

/// Moves `from`'s gradients of `tensors` into `into`, adding to one already there (a tied table
/// gets one from the head and one from the embedding).
fn merge(into: &mut GradStore, from: &mut GradStore, tensors: &[Tensor]) -> Result<()> {
    for t in tensors {
        if let Some(g) = from.remove(t) {
            let g = match into.remove(t) {
                Some(prev) => (prev + g)?,
                None => g,
            };
            into.insert(t, g);
        }
    }
    Ok(())
}

fn checkpointed(model: &Decoder, input: &Tensor, target: &Tensor, forward_done: &mut dyn FnMut()) -> Result<StepGrads> {
    let (b, s) = input.dims2()?;
    let cfg = &model.cfg;
    let layers = cfg.num_hidden_layers;
    let rope = model.rope(0, s)?;
    // Forward without a graph: detached weights, each layer's input kept.
    let mut x = model.embed(input)?.detach();
    let mut inputs = Vec::with_capacity(layers);
    for l in 0..layers {
        inputs.push(x.clone());
        let mut cache = model.new_cache_of(CacheKind::Concat, b, s)?;
        let pass = Pass { cfg, rope: &rope, offset: 0, mode: model.attention };
        x = model.layer(l)?.detached()?.forward(x, l, &pass, &mut cache)?;
    }
    forward_done();
    // The head with a graph from the last layer's output.
    let out = Var::from_tensor(&x)?;
    drop(x);
    let loss = cross_entropy(model, model.head(out.as_tensor(), Logits::All)?, target)?;
    let mut grads = loss.backward()?;
    // The head's graph goes now, not at the end of the step.
    let value = loss.to_scalar::<f32>()?;
    drop(loss);
    let mut g = grads.remove(out.as_tensor()).ok_or_else(|| LabError::other("the head gave its input no gradient"))?;
    drop(out);
    // Back through the layers, one recomputed graph at a time.
    for l in (0..layers).rev() {
        let layer = model.layer(l)?;
        let xin = Var::from_tensor(&inputs.pop().ok_or_else(|| LabError::other("a layer input is missing"))?)?;
        let mut cache = model.new_cache_of(CacheKind::Concat, b, s)?;
        let pass = Pass { cfg, rope: &rope, offset: 0, mode: model.attention };
        let y = layer.forward(xin.as_tensor().clone(), l, &pass, &mut cache)?;
        let mut local = (y * &g)?.sum_all()?.backward()?;
        drop(cache);
        g = local
            .remove(xin.as_tensor())
            .ok_or_else(|| LabError::other(format!("layer {l} gave its input no gradient")))?;
        merge(&mut grads, &mut local, &layer.tensors()?)?;
    }
    // The embedding table's gradient (added to the head's when tied).
    let x0 = model.embed(input)?;
    let mut local = (x0 * &g)?.sum_all()?.backward()?;
    drop(g);
    merge(&mut grads, &mut local, &model.embed_table().into_iter().collect::<Vec<_>>())?;
    Ok(StepGrads { loss: value, grads })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::DecoderConfig;
    use crate::model::load::synthetic::Synthetic;
    use crate::model::load::weights::load_all;
    use crate::model::Precision;
    use candle_core::Device;

    fn tiny_model(tied: bool) -> Decoder {
        let mut cfg = DecoderConfig::preset("tiny").unwrap();
        cfg.tie_word_embeddings = tied;
        let mut source = Synthetic::new(cfg.clone(), 5);
        let w = load_all(&cfg, &mut source, Precision::F32, &Device::Cpu, None, |_, _| Ok(())).unwrap();
        trainable(Decoder::new(&cfg, Precision::F32, w, &Device::Cpu).unwrap()).unwrap()
    }

    /// Checkpointing recomputes the same graph: the same loss and the same gradients.
    #[test]
    fn checkpointing_changes_no_gradient() {
        for tied in [true, false] {
            let model = tiny_model(tied);
            let ids = Tensor::new(&[[3u32, 9, 27, 81, 243, 17, 5, 66, 12], [1, 2, 3, 4, 5, 6, 7, 8, 9]], &Device::Cpu)
                .unwrap();
            let (input, target) = shift(&ids).unwrap();
            let plain = gradients(&model, &input, &target, false, &mut || ()).unwrap();
            let ckpt = gradients(&model, &input, &target, true, &mut || ()).unwrap();
            assert!((plain.loss - ckpt.loss).abs() < 1e-5, "loss {} vs {}", plain.loss, ckpt.loss);
            let vars = model.vars().unwrap();
            assert_eq!(vars.len(), if tied { 1 } else { 2 } + 1 + 12 * model.cfg.num_hidden_layers);
            for v in &vars {
                let (a, b) = (plain.grads.get(v).unwrap(), ckpt.grads.get(v).unwrap());
                let scale = a.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap().max(1e-6);
                let diff = (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                assert!(
                    diff <= 1e-4 * scale,
                    "tied {tied}: a gradient of shape {:?} differs by {diff} (max {scale})",
                    v.shape()
                );
            }
        }
    }
}
