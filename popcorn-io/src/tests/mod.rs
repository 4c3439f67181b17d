//! Tests of the io module: hand-written files per format, compared against exact values.

mod csv_tests;
mod idx_tests;
mod libsvm_tests;
mod load_tests;
mod npy_tests;
mod npz_tests;
mod sparse_tests;
mod write_tests;
