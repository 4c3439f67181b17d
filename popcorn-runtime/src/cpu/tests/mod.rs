//! Tests of the CPU primitives against independent naive references.

mod clusters;
mod contraction;
mod dense;
mod fused;
mod props;
mod reference;
mod sparse;
mod sparse_points;
