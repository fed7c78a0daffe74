//! The Prometheus text exposition format (0.0.4, and the OpenMetrics text that rdmad serves on
//! request), read back: the one parser of `/metrics` answers for `rdmactl top`, the live
//! tests and the benchmarks.
//!
//! [`parse`] returns every sample with its name, labels (unescaped: `\\`, `\"` and `\n` in a
//! label value are one character each, and a `}` or `,` inside quotes is part of the value)
//! and value, plus the `# TYPE` and `# HELP` of each family. Timestamps are accepted and
//! dropped. A malformed line is an error naming its line number; nothing is guessed.

use std::collections::BTreeMap;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series name as written (`rdma_probe_runs_total`, `..._bucket`).
    pub name: String,
    /// Label pairs in the order written, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value (`NaN`, `+Inf`, `-Inf` included).
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// `name{k="v",...}` with the label values escaped again, in the order written: a key
    /// that tells series apart.
    pub fn series(&self) -> String {
        if self.labels.is_empty() {
            return self.name.clone();
        }
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        format!("{}{{{}}}", self.name, labels.join(","))
    }
}

/// A parsed exposition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    /// Every sample, in order.
    pub samples: Vec<Sample>,
    /// `# TYPE` lines: family name (as written on the line) -> type (`counter`, `gauge`,
    /// `histogram`, `summary`, `info`, `untyped`, ...).
    pub types: BTreeMap<String, String>,
    /// `# HELP` lines: family name -> text (unescaped).
    pub help: BTreeMap<String, String>,
}

impl Exposition {
    /// The samples called exactly `name`.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// Every series (see [`Sample::series`]) and its value.
    pub fn series(&self) -> BTreeMap<String, f64> {
        self.samples.iter().map(|s| (s.series(), s.value)).collect()
    }
}

/// Why an exposition did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("exposition line {line}: {what}: {text:?}")]
pub struct ParseError {
    /// The 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub what: &'static str,
    /// The line (shortened).
    pub text: String,
}

/// Parse a whole exposition.
pub fn parse(text: &str) -> Result<Exposition, ParseError> {
    let mut out = Exposition::default();
    for (i, line) in text.lines().enumerate() {
        let err = |what| ParseError {
            line: i + 1,
            what,
            text: line.chars().take(120).collect(),
        };
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let comment = comment.trim_start();
            if let Some(rest) = comment.strip_prefix("TYPE ") {
                let (name, kind) = rest
                    .trim()
                    .split_once(' ')
                    .ok_or(err("TYPE without a type"))?;
                out.types.insert(name.to_owned(), kind.trim().to_owned());
            } else if let Some(rest) = comment.strip_prefix("HELP ") {
                let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
                out.help.insert(name.to_owned(), unescape_help(help));
            }
            // `# EOF` and other comments carry no sample.
            continue;
        }
        out.samples.push(sample(line).map_err(err)?);
    }
    Ok(out)
}

fn is_name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
}

/// One sample line: `name[{labels}] value [timestamp]`.
fn sample(line: &str) -> Result<Sample, &'static str> {
    let line = line.trim_start();
    let end = line
        .char_indices()
        .find(|&(i, c)| !is_name_char(c, i == 0))
        .map_or(line.len(), |(i, _)| i);
    if end == 0 {
        return Err("no metric name");
    }
    let name = line[..end].to_owned();
    let mut rest = &line[end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = parse_labels(after, &mut labels)?;
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = parse_value(value).ok_or("value is not a number")?;
    if let Some(ts) = fields.next() {
        ts.parse::<f64>().map_err(|_| "timestamp is not a number")?;
    }
    if fields.next().is_some() {
        return Err("text after the timestamp");
    }
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// The labels after `{`, up to and including the closing `}`; returns what follows.
fn parse_labels<'a>(
    mut text: &'a str,
    out: &mut Vec<(String, String)>,
) -> Result<&'a str, &'static str> {
    loop {
        text = text.trim_start();
        if let Some(rest) = text.strip_prefix('}') {
            return Ok(rest);
        }
        let end = text
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit())))
            .map_or(text.len(), |(i, _)| i);
        if end == 0 {
            return Err("bad label name");
        }
        let key = text[..end].to_owned();
        text = text[end..].trim_start();
        text = text
            .strip_prefix('=')
            .ok_or("label without =")?
            .trim_start();
        text = text.strip_prefix('"').ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = text.char_indices();
        let close = loop {
            match chars.next() {
                None => return Err("unterminated label value"),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    _ => return Err("bad escape in a label value"),
                },
                Some((_, c)) => value.push(c),
            }
        };
        out.push((key, value));
        text = text[close + 1..].trim_start();
        if let Some(rest) = text.strip_prefix(',') {
            text = rest;
        } else if !text.starts_with('}') {
            return Err("labels not separated by ,");
        }
    }
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => text.parse::<f64>().ok().filter(|v| v.is_finite()),
    }
}

fn unescape_help(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A label value escaped for the text format.
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_types_and_help() {
        let text = "# HELP rdma_probe_runs_total Successful probe runs\n\
                    # TYPE rdma_probe_runs_total counter\n\
                    rdma_probe_runs_total{device=\"rxe0\",op=\"write\"} 12\n\
                    rdma_probe_cpu_seconds_total 0.25 1700000000000\n\
                    rdma_x{le=\"+Inf\"} +Inf\n\
                    rdma_y NaN\n\
                    # EOF\n";
        let e = parse(text).unwrap();
        assert_eq!(e.types["rdma_probe_runs_total"], "counter");
        assert_eq!(e.help["rdma_probe_runs_total"], "Successful probe runs");
        assert_eq!(e.samples.len(), 4);
        let runs = &e.samples[0];
        assert_eq!(runs.label("op"), Some("write"));
        assert_eq!(runs.value, 12.0);
        assert_eq!(
            runs.series(),
            "rdma_probe_runs_total{device=\"rxe0\",op=\"write\"}"
        );
        assert_eq!(e.samples[1].value, 0.25);
        assert!(e.samples[1].labels.is_empty());
        assert_eq!(e.samples[2].value, f64::INFINITY);
        assert!(e.samples[3].value.is_nan());
    }

    #[test]
    fn label_values_are_unescaped_and_may_hold_braces_and_commas() {
        let text = r#"m{a="x}y",b="1,2",c="q\"uote",d="back\\slash",e="new\nline"} 3"#;
        let e = parse(text).unwrap();
        let s = &e.samples[0];
        assert_eq!(s.label("a"), Some("x}y"));
        assert_eq!(s.label("b"), Some("1,2"));
        assert_eq!(s.label("c"), Some("q\"uote"));
        assert_eq!(s.label("d"), Some("back\\slash"));
        assert_eq!(s.label("e"), Some("new\nline"));
        assert_eq!(s.value, 3.0);
        // series() escapes again: it round-trips.
        assert_eq!(s.series(), text.rsplit_once(' ').unwrap().0);
    }

    #[test]
    fn malformed_lines_are_errors_with_their_number() {
        for bad in [
            "m{a=\"x} 1",
            "m{a=x} 1",
            "m{a=\"x\" b=\"y\"} 1",
            "m 1 2 3",
            "m",
            "m abc",
            "{a=\"b\"} 1",
            "m{a=\"\\q\"} 1",
        ] {
            let e = parse(&format!("ok 1\n{bad}\n")).unwrap_err();
            assert_eq!(e.line, 2, "{bad}: {e}");
        }
    }
}
