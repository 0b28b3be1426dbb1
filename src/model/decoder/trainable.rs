//! The model as trainable variables: its weights made candle `Var`s in F32, and the list of them an
//! optimizer updates.

use crate::error::{LabError, Result};
use crate::model::decoder::layer::{Layer, Mlp};
use crate::model::decoder::model::{Decoder, LayerSlot};
use crate::model::layers::embedding::Embedding;
use crate::model::layers::linear::Linear;
use candle_core::Tensor;

impl Decoder {
    /// The same model with every dense weight a trainable `Var`, as a model left in training
    /// mode: candle then records each op's inputs, so an output keeps its whole forward graph
    /// alive. Tensors are converted one at a time (the peak is one tensor above the model);
    /// quantized weights stay as they are.
    pub fn into_trainable(self) -> Result<Self> {
        fn var(t: Tensor) -> Result<Tensor> {
            Ok(candle_core::Var::from_tensor(&t)?.as_tensor().clone())
        }
        fn lin(l: Linear) -> Result<Linear> {
            Ok(match l {
                Linear::Dense(d) => {
                    let (w, b) = (d.weight().clone(), d.bias().cloned());
                    drop(d);
                    Linear::Dense(candle_nn::Linear::new(var(w)?, b.map(var).transpose()?))
                }
                q => q,
            })
        }
        let Decoder { cfg, precision, attention, embed, layers, norm, lm_head, device, weight_bytes, streamer, .. } =
            self;
        if streamer.is_some() {
            return Err(LabError::Unsupported("a model with streamed layers cannot be made trainable".into()));
        }
        // A tied head is the embedding table itself: one Var for both (two would be two copies
        // and two half gradients).
        let table_id = match &embed {
            Embedding::Dense(t) => Some(t.id()),
            _ => None,
        };
        let embed = match embed {
            Embedding::Dense(t) => Embedding::Dense(var(t)?),
            q => q,
        };
        let lm_head = match (lm_head, &embed) {
            (Linear::Dense(d), Embedding::Dense(table)) if Some(d.weight().id()) == table_id => {
                drop(d);
                Linear::Dense(candle_nn::Linear::new(table.clone(), None))
            }
            (l, _) => lin(l)?,
        };
        let mut out = Vec::with_capacity(layers.len());
        for slot in layers {
            let LayerSlot::Resident(l) = slot else { continue };
            let Mlp::Dense { gate, up, down } = l.mlp else {
                return Err(LabError::Unsupported("training a mixture of experts: the lab trains dense models".into()));
            };
            out.push(LayerSlot::Resident(Layer {
                q: lin(l.q)?,
                k: lin(l.k)?,
                v: lin(l.v)?,
                o: lin(l.o)?,
                mlp: Mlp::Dense { gate: lin(gate)?, up: lin(up)?, down: lin(down)? },
                ln1: var(l.ln1)?,
                ln2: var(l.ln2)?,
                qk_norm: match l.qk_norm {
                    Some((qn, kn)) => Some((var(qn)?, var(kn)?)),
                    None => None,
                },
                fused: None,
            }));
        }
        Ok(Decoder {
            cfg,
            precision,
            attention,
            embed,
            layers: out,
            norm: var(norm)?,
            lm_head,
            device,
            weight_bytes,
            streamer: None,
            profile: Default::default(),
            comm: None,
        })
    }

    /// Every trainable tensor once (a tied table once), in a fixed order: the embedding, each
    /// layer's (see `Layer::tensors`), the final norm, an untied head.
    pub fn vars(&self) -> Result<Vec<candle_core::Var>> {
        let mut out = Vec::new();
        let mut push = |t: &Tensor| -> Result<()> {
            if t.is_variable() && !out.iter().any(|v: &candle_core::Var| v.as_tensor().id() == t.id()) {
                out.push(candle_core::Var::from_tensor(t)?);
            }
            Ok(())
        };
        if let Embedding::Dense(t) = &self.embed {
            push(t)?;
        }
        for l in 0..self.layers.len() {
            for t in self.layer(l)?.tensors()? {
                push(&t)?;
            }
        }
        push(&self.norm)?;
        if let Linear::Dense(d) = &self.lm_head {
            push(d.weight())?;
        }
        Ok(out)
    }
}
