//! `rdmactl lesson`: the course "RDMA programming fundamentals" in the terminal.
//!
//! Every chapter (English and Italian) and every C example is embedded in the binary with
//! `include_str!`, so `rdmactl lesson show 5` works on a host that has only the binary.
//! The chapters are mdBook sources (lessons/src/{en,it}/NN-slug.md); rendering turns them
//! into plain text: headings underlined, code fences indented, and mdBook's
//! `{{#include ../../code/NN_x.c}}` replaced by the embedded file.
use anyhow::{bail, Context as _};
use std::io::Write;
use std::process::ExitCode;

use crate::exit::CodedError;

/// Read the course: `lesson list`, `lesson show N [--lang it]`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: LessonCommand,
}

#[derive(clap::Subcommand, Debug)]
enum LessonCommand {
    /// List the chapters with their numbers and titles.
    List {
        /// Language of the titles.
        #[arg(long, value_enum, default_value_t = Lang::En)]
        lang: Lang,
    },
    /// Print one chapter, with its C example inlined.
    Show {
        /// Chapter number (see `lesson list`) or slug (e.g. 3, 03, memory-registration).
        chapter: String,
        /// Language of the chapter.
        #[arg(long, value_enum, default_value_t = Lang::En)]
        lang: Lang,
    },
    /// Print the answers to one chapter's exercises (kept apart from the questions).
    Answers {
        /// Chapter number (a chapter with exercises) or slug.
        chapter: String,
        /// Language of the answers.
        #[arg(long, value_enum, default_value_t = Lang::En)]
        lang: Lang,
    },
    /// Checked exercises: `list`, `start NAME`, `check NAME`.
    Exercise {
        #[command(subcommand)]
        command: super::exercise::ExerciseCommand,
    },
}

/// The two languages of the course.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Lang {
    /// English.
    En,
    /// Italian (italiano).
    It,
}

impl Lang {
    #[cfg(test)]
    fn dir(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::It => "it",
        }
    }
}

/// One chapter: its number, slug (the file name without `NN-` and `.md`), both texts.
struct Chapter {
    number: u8,
    slug: &'static str,
    en: &'static str,
    it: &'static str,
}

impl Chapter {
    fn text(&self, lang: Lang) -> &'static str {
        match lang {
            Lang::En => self.en,
            Lang::It => self.it,
        }
    }

    /// `NN-slug.md`.
    fn file_name(&self) -> String {
        format!("{:02}-{}.md", self.number, self.slug)
    }

    /// The first `# N. Title` line, without the `# N. `.
    fn title(&self, lang: Lang) -> &'static str {
        let line = self
            .text(lang)
            .lines()
            .find_map(|l| l.strip_prefix("# "))
            .unwrap_or(self.slug)
            .trim();
        match line.split_once(". ") {
            Some((n, rest)) if n.chars().all(|c| c.is_ascii_digit()) => rest,
            _ => line,
        }
    }
}

macro_rules! chapter {
    ($n:expr, $slug:literal) => {
        Chapter {
            number: $n,
            slug: $slug,
            en: include_str!(concat!(
                "../../../lessons/src/en/",
                stringify!($n),
                "-",
                $slug,
                ".md"
            )),
            it: include_str!(concat!(
                "../../../lessons/src/it/",
                stringify!($n),
                "-",
                $slug,
                ".md"
            )),
        }
    };
}

/// The chapters, in order. `stringify!` keeps the leading zero of `01`..`09`.
#[allow(clippy::zero_prefixed_literal)]
const CHAPTERS: [Chapter; 17] = [
    chapter!(01, "why-rdma"),
    chapter!(02, "architecture"),
    chapter!(03, "memory-registration"),
    chapter!(04, "queue-pairs"),
    chapter!(05, "verbs-api"),
    chapter!(06, "one-vs-two-sided"),
    chapter!(07, "transports"),
    chapter!(08, "error-handling"),
    chapter!(09, "resources"),
    chapter!(10, "security"),
    chapter!(11, "observing"),
    chapter!(12, "api-breadth"),
    chapter!(13, "design-patterns"),
    chapter!(14, "tools"),
    chapter!(15, "threads"),
    chapter!(16, "event-driven-server"),
    chapter!(17, "debugging"),
];

macro_rules! code {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!("../../../lessons/code/", $name)),
        )
    };
}

/// The files under lessons/code/ that chapters include, by file name.
const CODE: &[(&str, &str)] = &[
    code!("ah_attr.h"),
    code!("lab_common.h"),
    code!("01_devices.c"),
    code!("02_fabric.c"),
    code!("03_reg_mr.c"),
    code!("04_qp_states.c"),
    code!("05_rc_loopback.c"),
    code!("05_rdma_cm.c"),
    code!("05_cm_ep.c"),
    code!("05_rc_tcp.c"),
    code!("05_cm_event_loop.c"),
    code!("06_write_read.c"),
    code!("06_sge_rereg.c"),
    code!("07_gid_table.c"),
    code!("08_wc_errors.c"),
    code!("08_dead_peer.c"),
    code!("09_teardown.c"),
    code!("10_rkey_check.c"),
    code!("11_counters.c"),
    code!("12_ud.c"),
    code!("12_mcast.c"),
    code!("12_srq_async.c"),
    code!("12_inline_signal.c"),
    code!("12_wr_api.c"),
    code!("12_fence_events.c"),
    code!("13_tos.c"),
    code!("15_threads.c"),
    code!("16_cq_events.c"),
    code!("17_triage.c"),
];

/// The experiments `rdmactl experiment run <name>` provides (the one list, in rdmakit's
/// catalog model, so the default build without verbs has it too); chapters may only name
/// these.
pub const EXPERIMENTS: &[&str] = rdmakit::catalog::Experiment::NAMES;

/// Run `rdmactl lesson ...`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match args.command {
        LessonCommand::List { lang } => {
            for c in &CHAPTERS {
                writeln!(out, "{:>2}  {:<20}  {}", c.number, c.slug, c.title(lang))?;
            }
            writeln!(
                out,
                "\nRead one with `rdmactl lesson show N [--lang en|it]`.\nHands-on: `rdmactl experiment run NAME`, NAME one of: {}.",
                EXPERIMENTS.join(", ")
            )?;
        }
        LessonCommand::Exercise { command } => {
            drop(out);
            return super::exercise::run(command);
        }
        LessonCommand::Answers { chapter, lang } => {
            let c = find(&chapter)?;
            let text = answers(c, lang).ok_or_else(|| {
                anyhow::Error::new(CodedError {
                    message: format!("chapter {} has no exercises to answer", c.number),
                    code: 2,
                })
            })?;
            let text = render(&text).context("rendering the answers")?;
            out.write_all(text.as_bytes())?;
        }
        LessonCommand::Show { chapter, lang } => {
            let c = find(&chapter)?;
            let text =
                render(c.text(lang)).with_context(|| format!("rendering chapter {}", c.number))?;
            out.write_all(text.as_bytes())?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The answers to every chapter's exercises, one `## N. Title` section per chapter.
const ANSWERS_EN: &str = include_str!("../../../lessons/src/en/answers.md");
const ANSWERS_IT: &str = include_str!("../../../lessons/src/it/answers.md");

/// Chapter `c`'s section of the answers file, heading included.
fn answers(c: &Chapter, lang: Lang) -> Option<String> {
    let all = match lang {
        Lang::En => ANSWERS_EN,
        Lang::It => ANSWERS_IT,
    };
    let head = format!("## {}. ", c.number);
    let start = all.lines().position(|l| l.starts_with(&head))?;
    let lines: Vec<&str> = all.lines().skip(start).collect();
    let end = lines[1..]
        .iter()
        .position(|l| l.starts_with("## "))
        .map_or(lines.len(), |i| i + 1);
    Some(lines[..end].join("\n") + "\n")
}

/// A chapter by number (`3`, `03`) or slug (`memory-registration`).
fn find(which: &str) -> anyhow::Result<&'static Chapter> {
    let which = which.trim();
    let found = match which.parse::<u8>() {
        Ok(n) => CHAPTERS.iter().find(|c| c.number == n),
        Err(_) => CHAPTERS.iter().find(|c| c.slug == which),
    };
    found.ok_or_else(|| {
        anyhow::Error::new(CodedError {
            message: format!(
                "no chapter {which:?}: use a number from 1 to {} or a slug (see `rdmactl lesson list`)",
                CHAPTERS.len()
            ),
            code: 2,
        })
    })
}

/// The embedded file an `{{#include PATH}}` in a chapter (under src/<lang>/) points to.
/// Chapters include `../../code/NAME`, which is lessons/code/NAME.
fn resolve_include(path: &str) -> Option<&'static str> {
    let name = path.trim().strip_prefix("../../code/")?;
    CODE.iter().find(|(n, _)| *n == name).map(|(_, text)| *text)
}

/// The include directives of a chapter, in order (the PATH of each `{{#include PATH}}`).
fn includes(md: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = md;
    while let Some(start) = rest.find("{{#include ") {
        let after = &rest[start + "{{#include ".len()..];
        match after.find("}}") {
            Some(end) => {
                found.push(after[..end].trim());
                rest = &after[end..];
            }
            None => break,
        }
    }
    found
}

/// `[text](target)` links of a text: (text, target).
fn links(md: &str) -> Vec<(&str, &str)> {
    let mut found = Vec::new();
    let mut rest = md;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find("](") else { break };
        let text = &after[..close];
        let target_start = &after[close + 2..];
        let Some(end) = target_start.find(')') else {
            break;
        };
        if !text.contains('\n') && !text.contains('[') {
            found.push((text, &target_start[..end]));
        }
        rest = &target_start[end..];
    }
    found
}

/// Replace `[text](NN-slug.md)` by `text (chapter N)` and other links by `text (target)`.
fn render_links(line: &str) -> String {
    let mut out = line.to_string();
    for (text, target) in links(line) {
        let pretty = match chapter_of_link(target) {
            Some(c) => format!("{text} (chapter {})", c.number),
            None => format!("{text} ({target})"),
        };
        out = out.replace(&format!("[{text}]({target})"), &pretty);
    }
    out
}

/// The chapter a relative link like `03-memory-registration.md` or
/// `../it/03-memory-registration.md#anchor` points to.
fn chapter_of_link(target: &str) -> Option<&'static Chapter> {
    let path = target.split('#').next()?;
    let file = path.rsplit('/').next()?;
    CHAPTERS.iter().find(|c| c.file_name() == file)
}

/// Turn a chapter's Markdown into terminal text.
fn render(md: &str) -> anyhow::Result<String> {
    let mut out = String::with_capacity(md.len() * 2);
    let mut in_fence = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            out.push('\n');
            continue;
        }
        if let Some(start) = line.find("{{#include ") {
            let path = includes(&line[start..])
                .into_iter()
                .next()
                .context("unterminated {{#include}}")?;
            let Some(text) = resolve_include(path) else {
                bail!("{{{{#include {path}}}}}: no such embedded file");
            };
            for code_line in text.lines() {
                out.push_str("    ");
                out.push_str(&code_line.replace('\t', "        "));
                out.push('\n');
            }
            continue;
        }
        if in_fence {
            out.push_str("    ");
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let underline = |out: &mut String, text: &str, ch: char| {
            out.push_str(text);
            out.push('\n');
            out.extend(std::iter::repeat_n(ch, text.chars().count()));
            out.push('\n');
        };
        if let Some(h) = line.strip_prefix("# ") {
            underline(&mut out, h.trim(), '=');
        } else if let Some(h) = line.strip_prefix("## ") {
            out.push('\n');
            underline(&mut out, h.trim(), '-');
        } else if let Some(h) = line.strip_prefix("### ") {
            out.push('\n');
            out.push_str(h.trim());
            out.push('\n');
        } else {
            out.push_str(&render_links(line).replace("**", ""));
            out.push('\n');
        }
    }
    if in_fence {
        bail!("unterminated code fence");
    }
    Ok(out)
}

/// Every experiment name a text mentions as `rdmactl experiment run <name>`.
#[cfg(test)]
fn experiments_named(md: &str) -> Vec<&str> {
    md.match_indices("rdmactl experiment run ")
        .map(|(i, m)| {
            let rest = &md[i + m.len()..];
            let end = rest
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '-'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_apart_from_every_chapter_with_exercises() {
        let mut answered = 0;
        for c in &CHAPTERS {
            for lang in [Lang::En, Lang::It] {
                let text = c.text(lang);
                let has_exercises =
                    text.contains("\n## Exercises\n") || text.contains("\n## Esercizi\n");
                assert!(
                    !text.contains("\n## Answers\n") && !text.contains("\n## Soluzioni\n"),
                    "chapter {} ({lang:?}) shows answers under its questions",
                    c.number
                );
                let a = answers(c, lang);
                assert_eq!(
                    a.is_some(),
                    has_exercises,
                    "chapter {} ({lang:?})",
                    c.number
                );
                if let Some(a) = a {
                    assert!(a.contains("\n1. "), "chapter {}: {a}", c.number);
                    assert_eq!(a.matches("\n## ").count(), 0, "one chapter's section only");
                    assert!(text.contains(&format!("rdmactl lesson answers {}", c.number)));
                    answered += 1;
                }
            }
        }
        assert_eq!(answered, 32, "16 chapters with exercises, in two languages");
    }
    use std::path::PathBuf;

    const LANGS: [Lang; 2] = [Lang::En, Lang::It];

    fn lessons_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../lessons")
    }

    #[test]
    fn every_chapter_exists_in_both_languages() {
        for (i, c) in CHAPTERS.iter().enumerate() {
            // In order; a gap is allowed while chapters are written on separate branches.
            if i > 0 {
                assert!(c.number > CHAPTERS[i - 1].number, "chapters out of order");
            } else {
                assert_eq!(c.number, 1, "the first chapter is 1");
            }
            for lang in LANGS {
                let text = c.text(lang);
                let first = text.lines().next().unwrap_or("");
                assert!(
                    first.starts_with(&format!("# {}. ", c.number)),
                    "{}/{}: first line must be `# {}. Title`, got {first:?}",
                    lang.dir(),
                    c.file_name(),
                    c.number
                );
                assert!(
                    text.contains("\n## "),
                    "{}/{} has no sections",
                    lang.dir(),
                    c.file_name()
                );
            }
        }
    }

    #[test]
    fn italian_chapters_are_complete_not_stubs() {
        for c in &CHAPTERS {
            assert_eq!(
                includes(c.en),
                includes(c.it),
                "chapter {}: en and it must include the same examples",
                c.number
            );
            let (en, it) = (c.en.len(), c.it.len());
            assert!(
                it * 10 >= en * 7,
                "chapter {}: the Italian text ({it} bytes) is much shorter than the English ({en} bytes)",
                c.number
            );
            let fences = |t: &str| t.matches("```").count();
            assert_eq!(
                fences(c.en),
                fences(c.it),
                "chapter {}: en and it must show the same code and output blocks",
                c.number
            );
        }
    }

    #[test]
    fn summary_lists_every_chapter_and_only_existing_files() {
        let summary = include_str!("../../../lessons/src/SUMMARY.md");
        let src = lessons_dir().join("src");
        for (_, target) in links(summary) {
            assert!(
                src.join(target).is_file(),
                "SUMMARY.md links to missing {target}"
            );
        }
        for c in &CHAPTERS {
            for lang in LANGS {
                let path = format!("{}/{}", lang.dir(), c.file_name());
                assert!(
                    links(summary).iter().any(|(_, t)| *t == path),
                    "SUMMARY.md does not list {path}"
                );
            }
        }
    }

    #[test]
    fn every_internal_link_resolves() {
        for c in &CHAPTERS {
            for lang in LANGS {
                let dir = lessons_dir().join("src").join(lang.dir());
                for (text, target) in links(c.text(lang)) {
                    if target.starts_with("http://") || target.starts_with("https://") {
                        continue;
                    }
                    let path = target.split('#').next().unwrap();
                    if path.is_empty() {
                        continue; // an anchor in the same page
                    }
                    assert!(
                        dir.join(path).is_file(),
                        "{}/{}: link [{text}]({target}) points to a missing file",
                        lang.dir(),
                        c.file_name()
                    );
                }
            }
        }
    }

    #[test]
    fn every_include_resolves_and_renders() {
        for c in &CHAPTERS {
            for lang in LANGS {
                let dir = lessons_dir().join("src").join(lang.dir());
                for path in includes(c.text(lang)) {
                    assert!(
                        resolve_include(path).is_some(),
                        "{}/{}: {{{{#include {path}}}}} is not embedded",
                        lang.dir(),
                        c.file_name()
                    );
                    assert!(
                        dir.join(path).is_file(),
                        "{}/{}: {{{{#include {path}}}}} does not exist for mdBook",
                        lang.dir(),
                        c.file_name()
                    );
                }
                let text = render(c.text(lang)).expect("renders");
                assert!(!text.contains("{{#include"), "unresolved include left");
            }
        }
        let five = render(find("5").unwrap().en).unwrap();
        assert!(five.contains("int main(int argc, char **argv)"));
        assert!(five.contains("static inline int loop_open(struct loop *l, const char *dev)"));
    }

    #[test]
    fn every_example_is_embedded_and_included_by_a_chapter() {
        let on_disk: Vec<String> = std::fs::read_dir(lessons_dir().join("code"))
            .expect("lessons/code")
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".c") || n.ends_with(".h"))
            .collect();
        for name in &on_disk {
            assert!(
                CODE.iter().any(|(n, _)| n == name),
                "lessons/code/{name} is not embedded in CODE"
            );
            let path = format!("../../code/{name}");
            assert!(
                CHAPTERS
                    .iter()
                    .any(|c| includes(c.en).contains(&path.as_str())),
                "no chapter includes lessons/code/{name}"
            );
        }
        for (name, _) in CODE {
            assert!(
                on_disk.iter().any(|n| n == name),
                "CODE lists missing {name}"
            );
        }
    }

    #[test]
    fn only_known_experiments_are_named() {
        let mut named = 0;
        for c in &CHAPTERS {
            for lang in LANGS {
                for name in experiments_named(c.text(lang)) {
                    named += 1;
                    assert!(
                        EXPERIMENTS.contains(&name),
                        "{}/{} names unknown experiment {name:?}",
                        lang.dir(),
                        c.file_name()
                    );
                }
            }
        }
        // The CLI is `rdmactl experiment run NAME` / `rdmactl experiment list`.
        for c in &CHAPTERS {
            for lang in LANGS {
                let text = c.text(lang);
                for (i, m) in text.match_indices("rdmactl experiment ") {
                    let next = &text[i + m.len()..];
                    assert!(
                        next.starts_with("run ") || next.starts_with("list"),
                        "{}/{}: write `rdmactl experiment run NAME`, not {:?}",
                        lang.dir(),
                        c.file_name(),
                        &next[..next.len().min(30)]
                    );
                }
            }
        }
        let readme = include_str!("../../../lessons/src/README.md");
        for name in experiments_named(readme) {
            assert!(EXPERIMENTS.contains(&name) || name.is_empty());
        }
        assert!(named >= 22, "every chapter should name its experiment");
        // Each experiment's own chapter (its lesson in the one list) mentions it.
        for e in rdmakit::catalog::Experiment::ALL {
            let chapter = CHAPTERS
                .iter()
                .find(|c| c.slug == e.lesson().as_str())
                .expect("every lesson is a chapter");
            assert!(
                chapter.en.contains(e.as_str()),
                "chapter {} does not mention its experiment {e}",
                chapter.slug
            );
        }
    }

    #[test]
    fn chapters_and_experiments_match_the_catalog() {
        // The counter catalog links counters to chapters by slug and to experiments by name.
        let slugs: Vec<&str> = CHAPTERS.iter().map(|c| c.slug).collect();
        assert_eq!(
            slugs,
            rdmakit::catalog::Lesson::NAMES,
            "chapter slugs must match rdmakit::catalog::Lesson, in order"
        );
    }

    #[test]
    fn find_accepts_numbers_and_slugs() {
        assert_eq!(find("3").unwrap().slug, "memory-registration");
        assert_eq!(find("03").unwrap().slug, "memory-registration");
        assert_eq!(find("security").unwrap().number, 10);
        assert_eq!(find("12").unwrap().slug, "api-breadth");
        assert_eq!(find("13").unwrap().slug, "design-patterns");
        assert_eq!(find("14").unwrap().slug, "tools");
        assert_eq!(find("15").unwrap().slug, "threads");
        assert_eq!(find("16").unwrap().slug, "event-driven-server");
        assert!(find(&(CHAPTERS.len() + 1).to_string()).is_err());
        assert!(find("nope").is_err());
    }

    #[test]
    fn links_to_chapters_render_as_chapter_numbers() {
        assert_eq!(
            render_links("see [registration](03-memory-registration.md) now"),
            "see registration (chapter 3) now"
        );
        assert_eq!(render_links("[x](https://a.b/c)"), "x (https://a.b/c)");
    }
}
