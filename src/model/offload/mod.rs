//! Layers kept off the GPU: where each layer lives (`placement`). The streamer that moves offloaded
//! layers' weights in and out is the decoder's (`model::decoder::streamer`), the timers of a step
//! across devices `model::profile`.

pub mod placement;
