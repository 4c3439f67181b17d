//! Popcorn's benchmarks and the baseline they compare against:
//! - [`naive`]: the hand-written naive GPU implementation of Kernel K-means that the Popcorn
//!   paper compares its sparse formulation against (also the kernel_kmeans example's
//!   `-l naive`);
//! - the `bench_kkmeans` binary: Kernel K-means on the paper's shapes, popcorn against the
//!   baseline, against the device's measured ceilings (BENCHMARKS.md);
//! - the `bench_cluster_sums` binary: the cluster-sums kernel alone, with its launch choices
//!   forced, against the K-read floor and cuSPARSE;
//! - the `bench_contractions` binary: fused contractions (Lloyd, kernel smoothing) against
//!   their peers;
//! - the `bench_ranks` binary: Kernel K-means iterations on one GPU against several (the
//!   speed-up of a partitioned plan), alternating.
//!
//! - [`read`]: the read floor, a streaming read of the buffer a step reads.
//!
//! The first two reach the GPU through the CUDA backend's explicitly unsafe raw API
//! ([`popcorn_runtime::cuda::raw`]) where they run kernels of their own.
#![warn(missing_docs)]

pub mod naive;
pub mod read;
pub mod stats;
