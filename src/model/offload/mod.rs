//! Layers kept off the GPU: where each layer lives (`placement`), the streamer that moves
//! offloaded layers' weights in and out, and where a step's time goes across devices (`profile`).

pub mod placement;
pub mod profile;
pub mod streamer;
