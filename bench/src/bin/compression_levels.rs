//! Bytes and CPU of each compression level on rdmad's exposition, in one run.
//!
//! `cargo run --release -p rdma-bench --bin compression_levels [DEVICES] [ROUNDS]` writes the
//! synthetic tree (64 devices, 30 rounds by default), encodes rdmad's text exposition of it
//! once (default collectors, as `/metrics` does), and then, ROUNDS times in a rotating order,
//! compresses it whole with gzip as rdmad sends it (libdeflate, levels 1-12, through
//! `rdmad::encoding::gzip`), with gzip from miniz (flate2's default backend, the streaming
//! encoder tower-http's compression layer uses; levels 1-9) and with zstd levels 1, 3, 4, 6,
//! 9 and 19. Prints, per level, the compressed bytes, their share of the plain exposition
//! (target: gzip <= 10%), the p50 time of one compression, its ratio to libdeflate at rdmad's
//! default level, and the entropy floor of the counter values alone (what no compressor can
//! go below). A measurement, never a test.
#![forbid(unsafe_code)]

use std::io::Write;
use std::time::Duration;

use rdma_bench::{default_collectors, median, synthetic_sysfs, time};
use rdmad::metrics::Format;

#[derive(Clone, Copy, PartialEq)]
enum Codec {
    Libdeflate(u8),
    Miniz(u32),
    Zstd(i32),
}

fn compress(codec: Codec, text: &[u8]) -> Vec<u8> {
    match codec {
        Codec::Libdeflate(level) => rdmad::encoding::gzip(level, text),
        Codec::Miniz(level) => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
            e.write_all(text).expect("writing into a Vec");
            e.finish().expect("writing into a Vec")
        }
        Codec::Zstd(level) => zstd::encode_all(text, level).expect("writing into a Vec"),
    }
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let devices: u32 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(30);
    let root = synthetic_sysfs(devices)?;
    let text = default_collectors(&root).scrape().encode(Format::Text);
    let _ = std::fs::remove_dir_all(&root);
    let codecs: Vec<Codec> = rdmad::encoding::GZIP_LEVELS
        .map(Codec::Libdeflate)
        .chain((1..=9).map(Codec::Miniz))
        .chain([1, 3, 4, 6, 9, 19].map(Codec::Zstd))
        .collect();
    let default = Codec::Libdeflate(rdmad::encoding::DEFAULT_GZIP_LEVEL);
    let base = codecs
        .iter()
        .position(|c| *c == default)
        .expect("the default level is among those measured");
    let mut t: Vec<Vec<Duration>> = vec![Vec::new(); codecs.len()];
    let mut bytes = vec![0usize; codecs.len()];
    for round in 0..rounds {
        for step in 0..codecs.len() {
            let i = (round + step) % codecs.len();
            t[i].push(time(|| {
                bytes[i] = compress(codecs[i], text.as_bytes()).len()
            }));
        }
    }
    // Each value's bits (at least one), as if its length were known for free: a floor for
    // the values alone, without the names, labels and line structure.
    let value_bits: u64 = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .map(|v| u64::from((64 - v.leading_zeros()).max(1)))
        .sum();
    println!(
        "exposition: {devices} devices, {} bytes plain, {} samples; counter values alone: at least {} bytes ({:.1}%)",
        text.len(),
        text.lines().filter(|l| !l.starts_with('#')).count(),
        value_bits / 8,
        100.0 * (value_bits / 8) as f64 / text.len() as f64
    );
    let p50: Vec<f64> = t.into_iter().map(|v| median(v).as_secs_f64()).collect();
    for (i, codec) in codecs.iter().enumerate() {
        let name = match codec {
            Codec::Libdeflate(l) => format!("gzip {l} (libdeflate, rdmad)"),
            Codec::Miniz(l) => format!("gzip {l} (miniz)"),
            Codec::Zstd(l) => format!("zstd {l}"),
        };
        println!(
            "{name:<28} {:>7} bytes {:>6.2}% of plain  p50 {:>8.3} ms  {:>6.2}x rdmad's default",
            bytes[i],
            100.0 * bytes[i] as f64 / text.len() as f64,
            p50[i] * 1e3,
            p50[i] / p50[base]
        );
    }
    Ok(())
}
