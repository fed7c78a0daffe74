//! Content codings of responses: which one a request's `Accept-Encoding` asks for, and the
//! compression itself.
//!
//! The body is compressed whole, once it is encoded: gzip with libdeflate, whose parsing gives
//! fewer bytes for less CPU than a streaming zlib-style encoder at any level on rdmad's
//! exposition (`cargo run --release -p rdma-bench --bin compression_levels`: on the 64-device
//! tree libdeflate 6 gives 10.8% of plain in about 2 ms, miniz, which tower-http's streaming
//! layer uses, 11.6% at level 4 in about 3 ms and 11.4% at 9 in 15 ms; libdeflate 10 is 10.0%
//! in about 60 ms and 11 9.9% in about 115 ms). The compressed copy is about a ninth of the
//! plain one, which is dropped as soon as it is compressed.
//!
//! Negotiation follows RFC 9110 section 12.5.3: codings are matched case-insensitively
//! (`x-gzip` is gzip), `q` weights decide, `*` stands for every coding not named, `q=0` refuses
//! a coding, identity is acceptable unless refused. On equal weights a compressed coding wins
//! over identity, and zstd over gzip. When nothing acceptable is left the answer is
//! `406 Not Acceptable`.

use std::fmt;

/// A content coding rdmad can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Identity,
    Gzip,
    Zstd,
}

impl Coding {
    /// The `Content-Encoding` value; `None` for identity (no header is sent).
    pub fn header(self) -> Option<&'static str> {
        match self {
            Coding::Identity => None,
            Coding::Gzip => Some("gzip"),
            Coding::Zstd => Some("zstd"),
        }
    }
}

/// The request refuses every coding rdmad can send, identity included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAcceptable;

impl fmt::Display for NotAcceptable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no acceptable content coding (this server sends zstd, gzip or identity)")
    }
}

/// The gzip levels: libdeflate's, 1 (fastest) to 12 (smallest).
pub const GZIP_LEVELS: std::ops::RangeInclusive<u8> = 1..=12;

/// The default gzip level (see the module doc; `--web.gzip-level`).
pub const DEFAULT_GZIP_LEVEL: u8 = 6;

/// The zstd level: zstd's own default.
pub const ZSTD_LEVEL: i32 = 3;

/// The coding to answer a request with, given its `Accept-Encoding` (`None`: absent, so
/// identity). `codings` is what the server may send besides identity, best first on equal
/// weights; empty when compression is disabled.
pub fn negotiate(
    accept_encoding: Option<&str>,
    codings: &[Coding],
) -> Result<Coding, NotAcceptable> {
    let Some(header) = accept_encoding else {
        return Ok(Coding::Identity);
    };
    let mut named: Vec<(Coding, u16)> = Vec::new();
    let mut star: Option<u16> = None;
    for item in weighted_items(header) {
        let name = item.name;
        // A malformed weight makes the item unusable, not the header.
        let Some(q) = item.q else { continue };
        let coding = if name == "*" {
            star = Some(q);
            continue;
        } else if name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip") {
            Coding::Gzip
        } else if name.eq_ignore_ascii_case("zstd") {
            Coding::Zstd
        } else if name.eq_ignore_ascii_case("identity") {
            Coding::Identity
        } else {
            continue;
        };
        named.push((coding, q));
    }
    let weight = |coding: Coding| {
        named
            .iter()
            .find(|(c, _)| *c == coding)
            .map(|(_, q)| *q)
            .or(star)
    };
    let mut best: Option<(Coding, u16)> = None;
    for &coding in codings.iter().filter(|c| **c != Coding::Identity) {
        if let Some(q) = weight(coding).filter(|q| *q > 0) {
            if best.is_none_or(|(_, b)| q > b) {
                best = Some((coding, q));
            }
        }
    }
    // Identity is acceptable unless refused by name or by `*;q=0`.
    let identity = weight(Coding::Identity).unwrap_or(1);
    match best {
        Some((coding, q)) if q >= identity => Ok(coding),
        _ if identity > 0 => Ok(Coding::Identity),
        _ => Err(NotAcceptable),
    }
}

/// A qvalue (`0`, `0.5`, `1.000`) in thousandths; `None` when malformed.
/// One item of a comma-separated HTTP header weighted by `q` (`Accept`, `Accept-Encoding`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Weighted<'a> {
    /// The media range or coding, as sent (trimmed).
    pub name: &'a str,
    /// Its other parameters (`version=1.0.0`), quotes removed.
    pub params: Vec<(&'a str, &'a str)>,
    /// Its weight in thousandths (1000 when absent; RFC 9110's qvalue has at most three
    /// decimals); `None` when malformed.
    pub q: Option<u16>,
}

/// The items of an `Accept` or `Accept-Encoding` header, empty ones skipped: the one parser
/// of both headers' weights.
pub fn weighted_items(header: &str) -> impl Iterator<Item = Weighted<'_>> {
    header.split(',').filter_map(|item| {
        let mut parts = item.split(';').map(str::trim);
        let name = parts.next().unwrap_or("");
        if name.is_empty() {
            return None;
        }
        let mut q = Some(1000);
        let mut params = Vec::new();
        for param in parts {
            if let Some((key, value)) = param.split_once('=') {
                let (key, value) = (key.trim(), value.trim());
                if key.eq_ignore_ascii_case("q") {
                    q = qvalue(value);
                } else {
                    params.push((key, value.trim_matches('"')));
                }
            }
        }
        Some(Weighted { name, params, q })
    })
}

fn qvalue(text: &str) -> Option<u16> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac_value = format!("{frac:0<3}").parse::<u16>().ok()?;
    match int {
        "0" => Some(frac_value),
        "1" if frac_value == 0 => Some(1000),
        _ => None,
    }
}

/// `body` in `coding`, gzip at `gzip_level` (see [`gzip`]).
pub fn compress(coding: Coding, gzip_level: u8, body: Vec<u8>) -> Vec<u8> {
    match coding {
        Coding::Identity => body,
        Coding::Gzip => gzip(gzip_level, &body),
        Coding::Zstd => zstd::bulk::compress(&body, ZSTD_LEVEL)
            .expect("zstd compressing into memory fails only on allocation failure"),
    }
}

/// `data` as one gzip member, libdeflate at `level` (clamped to [`GZIP_LEVELS`]).
pub fn gzip(level: u8, data: &[u8]) -> Vec<u8> {
    let level = level.clamp(*GZIP_LEVELS.start(), *GZIP_LEVELS.end());
    let level = libdeflater::CompressionLvl::new(i32::from(level))
        .unwrap_or_else(|_| libdeflater::CompressionLvl::default());
    let mut compressor = libdeflater::Compressor::new(level);
    let mut out = vec![0; compressor.gzip_compress_bound(data.len())];
    let n = compressor
        .gzip_compress(data, &mut out)
        .expect("the output buffer has the bound libdeflate asks for");
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: &[Coding] = &[Coding::Zstd, Coding::Gzip];

    #[test]
    fn weighted_items_of_both_headers() {
        let items: Vec<Weighted> = weighted_items(
            "application/openmetrics-text; version=\"1.0.0\"; q=0.9, , text/plain;q=2, gzip",
        )
        .collect();
        assert_eq!(
            items,
            vec![
                Weighted {
                    name: "application/openmetrics-text",
                    params: vec![("version", "1.0.0")],
                    q: Some(900)
                },
                Weighted {
                    name: "text/plain",
                    params: vec![],
                    q: None
                },
                Weighted {
                    name: "gzip",
                    params: vec![],
                    q: Some(1000)
                },
            ]
        );
    }

    #[test]
    fn weights_decide_and_refusals_are_kept() {
        use Coding::*;
        for (header, want) in [
            (None, Ok(Identity)),
            (Some(""), Ok(Identity)),
            (Some("gzip"), Ok(Gzip)),
            (Some("x-gzip"), Ok(Gzip)),
            (Some("GZIP;q=0.8"), Ok(Gzip)),
            (Some("gzip ; Q=0.8"), Ok(Gzip)),
            (Some("zstd"), Ok(Zstd)),
            (Some("gzip, zstd"), Ok(Zstd)),
            (Some("gzip;q=0.5, zstd;q=0.9"), Ok(Zstd)),
            (Some("zstd;q=0.4, gzip"), Ok(Gzip)),
            (Some("zstd;q=0, gzip;q=0.1"), Ok(Gzip)),
            (Some("br, deflate"), Ok(Identity)),
            (Some("gzip;q=0"), Ok(Identity)),
            (Some("identity"), Ok(Identity)),
            (Some("identity, gzip;q=0.5"), Ok(Identity)),
            (Some("identity;q=0.5, gzip"), Ok(Gzip)),
            (Some("*"), Ok(Zstd)),
            (Some("*;q=0.5, zstd;q=0"), Ok(Gzip)),
            (Some("identity;q=0"), Err(NotAcceptable)),
            (Some("*;q=0"), Err(NotAcceptable)),
            (Some("identity;q=0, gzip;q=0.001"), Ok(Gzip)),
            (Some("br, identity;q=0"), Err(NotAcceptable)),
            // Malformed weights drop their item only.
            (Some("gzip;q=2, zstd;q=abc"), Ok(Identity)),
            (Some("gzip;q=0.1234, zstd;q=1.5"), Ok(Identity)),
            (Some("gzip;q=1.000"), Ok(Gzip)),
            (Some(",, ;q=1, gzip"), Ok(Gzip)),
        ] {
            assert_eq!(negotiate(header, BOTH), want, "{header:?}");
        }
    }

    #[test]
    fn disabled_compression_leaves_identity_or_refusal() {
        assert_eq!(negotiate(Some("gzip, zstd"), &[]), Ok(Coding::Identity));
        assert_eq!(
            negotiate(Some("gzip, identity;q=0"), &[]),
            Err(NotAcceptable)
        );
        assert_eq!(
            negotiate(Some("gzip, zstd"), &[Coding::Gzip]),
            Ok(Coding::Gzip)
        );
    }

    #[test]
    fn compressed_bodies_decode_to_the_original_at_every_level() {
        use std::io::Read;
        let text: String = (0..2000)
            .map(|i| {
                format!(
                    "rdma_port_rcv_data_bytes_total{{device=\"mlx5_{i}\",port=\"1\"}} {}\n",
                    i * 7919
                )
            })
            .collect();
        for level in GZIP_LEVELS.chain([0, 99]) {
            let gz = compress(Coding::Gzip, level, text.clone().into_bytes());
            assert!(
                gz.len() * 4 < text.len(),
                "level {level}: {} bytes",
                gz.len()
            );
            let mut back = String::new();
            flate2::read::GzDecoder::new(&gz[..])
                .read_to_string(&mut back)
                .unwrap();
            assert_eq!(back, text, "level {level}");
        }
        let zst = compress(Coding::Zstd, 6, text.clone().into_bytes());
        assert_eq!(zstd::decode_all(&zst[..]).unwrap(), text.as_bytes());
        assert_eq!(compress(Coding::Identity, 6, b"ok".to_vec()), b"ok");
    }
}
