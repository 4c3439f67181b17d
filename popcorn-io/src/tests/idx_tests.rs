use std::time::Instant;

use super::super::test_support::{assert_mentions, err_msg, gzip, TempDir};
use super::super::*;

/// An IDX file of unsigned bytes with the given sizes.
fn idx_bytes(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0x08, dims.len() as u8];
    for dim in dims {
        out.extend(dim.to_be_bytes());
    }
    out.extend(data);
    out
}

/// 3 images of 2 x 3 pixels, pixel value 10 * image + position.
fn three_images() -> (Vec<u8>, Vec<f64>) {
    let pixels: Vec<u8> = (0..3u8)
        .flat_map(|i| (0..6u8).map(move |p| 10 * i + p))
        .collect();
    let expected = pixels.iter().map(|&p| f64::from(p)).collect();
    (idx_bytes(&[3, 2, 3], &pixels), expected)
}

#[test]
fn plain_images_with_labels() {
    let dir = TempDir::new();
    let (images, expected) = three_images();
    let images = dir.file("train-images-idx3-ubyte", &images);
    let labels = dir.file("train-labels-idx1-ubyte", &idx_bytes(&[3], &[9, 0, 4]));
    let ds = load_idx(&images, Some(&labels)).unwrap();
    assert_eq!((ds.n, ds.d), (3, 6));
    assert_eq!(ds.x, expected);
    assert_eq!(ds.labels, Some(vec![9, 0, 4]));
    assert_eq!(ds.source, images);
    let ds = load_idx(&images, None).unwrap();
    assert_eq!((ds.x.len(), ds.labels.clone()), (18, None));
}

#[test]
fn gzip_images_match_plain_images() {
    let dir = TempDir::new();
    let (images, expected) = three_images();
    let plain = dir.file("plain-images-idx3-ubyte", &images);
    let gz = dir.file("gz-images-idx3-ubyte.gz", &gzip(&images));
    let labels_gz = dir.file(
        "gz-labels-idx1-ubyte.gz",
        &gzip(&idx_bytes(&[3], &[1, 2, 3])),
    );
    let from_plain = load_idx(&plain, None).unwrap();
    let from_gz = load_idx(&gz, Some(&labels_gz)).unwrap();
    assert_eq!(from_plain.x, from_gz.x);
    assert_eq!(from_gz.x, expected);
    assert_eq!(from_gz.labels, Some(vec![1, 2, 3]));
    // A `.gz` name holding plain bytes (a browser already unpacked it) is read as is.
    let misnamed = dir.file("m-images-idx3-ubyte.gz", &images);
    assert_eq!(load_idx(&misnamed, None).unwrap().x, expected);
}

#[test]
fn two_dimensional_idx_and_single_image() {
    let dir = TempDir::new();
    let path = dir.file("one.idx", &idx_bytes(&[1, 1], &[200]));
    let ds = load_idx(&path, None).unwrap();
    assert_eq!((ds.n, ds.d, ds.x.clone()), (1, 1, vec![200.0]));
}

#[test]
fn larger_than_one_chunk_round_trips() {
    // 70001 bytes cross the 65536-byte chunk boundary; 7 x 10001 is not a multiple of it.
    let dir = TempDir::new();
    let pixels: Vec<u8> = (0..7 * 10001u32).map(|i| (i * 31 % 251) as u8).collect();
    let path = dir.file(
        "big-images-idx3-ubyte.gz",
        &gzip(&idx_bytes(&[7, 1, 10001], &pixels)),
    );
    let ds = load_idx(&path, None).unwrap();
    assert_eq!((ds.n, ds.d), (7, 10001));
    assert!(ds.x.iter().zip(&pixels).all(|(&x, &p)| x == f64::from(p)));
}

#[test]
fn sibling_labels_are_found_with_or_without_gz() {
    let dir = TempDir::new();
    let (images, _) = three_images();
    let images_gz = dir.file("train-images-idx3-ubyte.gz", &gzip(&images));
    assert_eq!(find_idx_labels(&images_gz), None);
    let labels_gz = dir.file("train-labels-idx1-ubyte.gz", &[0]);
    assert_eq!(find_idx_labels(&images_gz), Some(labels_gz));
    let images_plain = dir.file("t10k-images.idx3-ubyte", &images);
    let labels_plain = dir.file("t10k-labels.idx1-ubyte", &[0]);
    assert_eq!(find_idx_labels(&images_plain), Some(labels_plain));
    let other = dir.file("other-images-idx3-ubyte", &images);
    let other_labels = dir.file("other-labels-idx1-ubyte.gz", &[0]);
    assert_eq!(find_idx_labels(&other), Some(other_labels));
    assert_eq!(find_idx_labels(dir.path().join("pixels.bin")), None);
}

#[test]
fn load_attaches_sibling_labels_by_default() {
    let dir = TempDir::new();
    let (images, _) = three_images();
    let images = dir.file("train-images-idx3-ubyte.gz", &gzip(&images));
    dir.file(
        "train-labels-idx1-ubyte.gz",
        &gzip(&idx_bytes(&[3], &[5, 6, 7])),
    );
    let ds = load(&images, &LoadOptions::default()).unwrap();
    assert_eq!(ds.labels, Some(vec![5, 6, 7]));
    let no_labels = LoadOptions {
        idx_labels: IdxLabels::None,
        ..LoadOptions::default()
    };
    assert_eq!(load(&images, &no_labels).unwrap().labels, None);
    let other = dir.file("mine", &idx_bytes(&[3], &[1, 1, 2]));
    let explicit = LoadOptions {
        idx_labels: IdxLabels::File(other),
        ..LoadOptions::default()
    };
    assert_eq!(
        load(&images, &explicit).unwrap().labels,
        Some(vec![1, 1, 2])
    );
}

#[test]
fn bad_magic_and_unsupported_type() {
    let dir = TempDir::new();
    let path = dir.file("bad-images-idx3-ubyte", b"\x01\x02\x08\x03rest");
    let msg = err_msg(load_idx(&path, None));
    assert_mentions(
        &msg,
        &[
            "bad-images-idx3-ubyte",
            "bad magic number 01 02 08 03 at byte offset 0",
            "00 00 08 03",
        ],
    );
    let path = dir.file(
        "f-images-idx3-ubyte",
        &[0, 0, 0x0d, 2, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0],
    );
    let msg = err_msg(load_idx(&path, None));
    assert_mentions(
        &msg,
        &[
            "f-images-idx3-ubyte",
            "element type 0x0d",
            "only unsigned bytes",
        ],
    );
}

#[test]
fn truncated_files_name_the_offset_plain_and_gzip() {
    let dir = TempDir::new();
    let (images, _) = three_images();
    // Header 16 bytes + 18 pixels = 34; cut to 30.
    let cut = &images[..30];
    let plain = dir.file("cut-images-idx3-ubyte", cut);
    let msg = err_msg(load_idx(&plain, None));
    assert_mentions(
        &msg,
        &[
            "cut-images-idx3-ubyte",
            "truncated at byte offset 30",
            "4 more bytes of the IDX data",
        ],
    );
    let gz = dir.file("cut-images-idx3-ubyte.gz", &gzip(cut));
    let msg = err_msg(load_idx(&gz, None));
    assert_mentions(
        &msg,
        &[
            "cut-images-idx3-ubyte.gz",
            "truncated at byte offset 30",
            "4 more bytes",
        ],
    );
    let short_header = dir.file("h-images-idx3-ubyte", &images[..9]);
    let msg = err_msg(load_idx(&short_header, None));
    assert_mentions(
        &msg,
        &[
            "h-images-idx3-ubyte",
            "truncated at byte offset 9",
            "the IDX sizes",
        ],
    );
    // A gzip stream cut in the middle (the download stopped).
    let big: Vec<u8> = (0..50_000u32).map(|i| (i * 7919 % 256) as u8).collect();
    let whole = gzip(&idx_bytes(&[50, 1000], &big));
    let broken = dir.file("broken-images-idx3-ubyte.gz", &whole[..whole.len() / 2]);
    let msg = err_msg(load_idx(&broken, None));
    assert_mentions(
        &msg,
        &["broken-images-idx3-ubyte.gz", "truncated at byte offset"],
    );
    let extra = dir.file("extra-images-idx3-ubyte", &[&images[..], &[1, 2]].concat());
    let msg = err_msg(load_idx(&extra, None));
    assert_mentions(
        &msg,
        &[
            "extra-images-idx3-ubyte",
            "unexpected data after byte offset 34",
        ],
    );
}

#[test]
fn label_file_mistakes() {
    let dir = TempDir::new();
    let (images, _) = three_images();
    let images = dir.file("a-images-idx3-ubyte", &images);
    let labels = dir.file("a-labels-idx1-ubyte", &idx_bytes(&[2], &[1, 2]));
    let msg = err_msg(load_idx(&images, Some(&labels)));
    assert_mentions(
        &msg,
        &[
            "a-images-idx3-ubyte",
            "has 3 images",
            "a-labels-idx1-ubyte",
            "has 2 labels",
        ],
    );
    let msg = err_msg(load_idx(&labels, None));
    assert_mentions(
        &msg,
        &[
            "a-labels-idx1-ubyte",
            "1-D IDX file",
            "pass the images file",
        ],
    );
    let msg = err_msg(load_idx_labels(&images));
    assert_mentions(
        &msg,
        &["a-images-idx3-ubyte", "must be 1-D", "3 dimensions"],
    );
    let missing = dir.path().join("none-labels-idx1-ubyte");
    let msg = err_msg(load_idx(&images, Some(&missing)));
    assert_mentions(&msg, &["cannot open", "none-labels-idx1-ubyte"]);
    let empty = dir.file("e-images-idx3-ubyte", &idx_bytes(&[0, 28, 28], &[]));
    let msg = err_msg(load_idx(&empty, None));
    assert_mentions(&msg, &["e-images-idx3-ubyte", "no data", "hold no images"]);
}

/// Loads the real Fashion-MNIST training images (with labels) if the system package is
/// installed: `apt-get install -y dataset-fashion-mnist`. Run with
/// `cargo test --release -- --ignored --nocapture`.
#[test]
#[ignore]
fn fashion_mnist_train_images_load_fast() {
    let images =
        std::path::Path::new("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
    if !images.is_file() {
        eprintln!("skipped: {} not found", images.display());
        return;
    }
    let start = Instant::now();
    let ds = load(images, &LoadOptions::default()).unwrap();
    let elapsed = start.elapsed();
    println!(
        "Fashion-MNIST train: {} x {} with labels loaded in {elapsed:?}",
        ds.n, ds.d
    );
    assert_eq!((ds.n, ds.d), (60000, 784));
    assert_eq!(ds.x.len(), 60000 * 784);
    let labels = ds.labels.as_ref().unwrap();
    assert_eq!(labels.len(), 60000);
    // Fashion-MNIST's training set has 6000 images of each of the 10 classes.
    let mut counts = [0usize; 10];
    for &label in labels {
        counts[usize::try_from(label).unwrap()] += 1;
    }
    assert_eq!(counts, [6000; 10]);
    assert!(ds.x.iter().all(|&v| (0.0..=255.0).contains(&v)));
    assert!(elapsed.as_secs_f64() < 3.0, "loading took {elapsed:?}");
}
