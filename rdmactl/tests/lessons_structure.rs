//! The English and Italian editions of the course have the same structure: the same
//! headings (level by level), the same code, the same program output, and the same
//! number of exercises and answers. Prose and diagrams are translated; code and output
//! are not, so they must be identical.
use std::fs;
use std::path::{Path, PathBuf};

fn lessons_src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../lessons/src")
}

/// The chapter files of one language, sorted by name.
fn chapters(lang: &str) -> Vec<PathBuf> {
    let dir = lessons_src().join(lang);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    files
}

/// One fenced block: its info string ("c", "text", ...) and its lines.
#[derive(Debug, PartialEq)]
struct Block {
    info: String,
    body: String,
}

/// Headings as (level, position) and fenced blocks, in order.
struct Structure {
    heading_levels: Vec<usize>,
    blocks: Vec<Block>,
    /// Numbered items ("1. ") directly under each level-2 heading, in order.
    numbered_per_section: Vec<usize>,
}

fn structure(text: &str) -> Structure {
    let mut s = Structure {
        heading_levels: Vec::new(),
        blocks: Vec::new(),
        numbered_per_section: Vec::new(),
    };
    let mut in_block: Option<(String, Vec<&str>)> = None;
    for line in text.lines() {
        if let Some((info, body)) = in_block.as_mut() {
            if line.starts_with("```") {
                s.blocks.push(Block {
                    info: std::mem::take(info),
                    body: body.join("\n"),
                });
                in_block = None;
            } else {
                body.push(line);
            }
            continue;
        }
        if let Some(info) = line.strip_prefix("```") {
            in_block = Some((info.trim().to_string(), Vec::new()));
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes > 0 && line[hashes..].starts_with(' ') {
            s.heading_levels.push(hashes);
            if hashes == 2 {
                s.numbered_per_section.push(0);
            }
            continue;
        }
        // "N. " at the start of a line counts when it continues the section's list
        // (1, 2, 3...): a wrapped sentence that starts with a number ("4096. ...") does not.
        let digits = line.chars().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 && line[digits..].starts_with(". ") {
            if let Some(n) = s.numbered_per_section.last_mut() {
                if line[..digits].parse::<usize>() == Ok(*n + 1) {
                    *n += 1;
                }
            }
        }
    }
    assert!(in_block.is_none(), "an unterminated ``` block");
    s
}

/// A block that must not be translated: code, and program output (a transcript that
/// starts with a shell prompt).
fn untranslated(b: &Block) -> bool {
    b.info == "c" || b.info == "rust" || b.info == "sh" || b.body.starts_with("$ ")
}

/// Code with its comments removed: comments are prose, and prose is translated.
fn without_comments(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        rest = match rest[start..].find("*/") {
            Some(end) => &rest[start + end + 2..],
            None => "",
        };
    }
    out.push_str(rest);
    out.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn both_editions_have_the_same_chapters() {
    let en: Vec<String> = chapters("en").iter().map(|p| name(p)).collect();
    let it: Vec<String> = chapters("it").iter().map(|p| name(p)).collect();
    assert!(
        en.len() >= 11,
        "expected the course's chapters, found {en:?}"
    );
    assert_eq!(en, it, "en and it must have the same chapter files");
}

#[test]
fn headings_code_output_and_exercises_match_between_en_and_it() {
    let mut compared = 0;
    for en_path in chapters("en") {
        let it_path = lessons_src().join("it").join(name(&en_path));
        let en = structure(&fs::read_to_string(&en_path).unwrap());
        let it = structure(&fs::read_to_string(&it_path).unwrap());
        let ch = name(&en_path);
        assert_eq!(
            en.heading_levels, it.heading_levels,
            "{ch}: en and it must have the same headings, level by level"
        );
        assert_eq!(
            en.numbered_per_section, it.numbered_per_section,
            "{ch}: en and it must number the same items (steps, exercises, answers) per section"
        );
        assert_eq!(
            en.blocks.len(),
            it.blocks.len(),
            "{ch}: en and it must have the same code and output blocks"
        );
        for (i, (a, b)) in en.blocks.iter().zip(&it.blocks).enumerate() {
            assert_eq!(a.info, b.info, "{ch}: block {} has another kind", i + 1);
            if untranslated(a) {
                assert_eq!(
                    without_comments(&a.body),
                    without_comments(&b.body),
                    "{ch}: block {} (code or program output) differs between en and it",
                    i + 1
                );
                compared += 1;
            }
        }
    }
    assert!(
        compared >= 20,
        "only {compared} code/output blocks compared: the parser lost them"
    );
}

#[test]
fn the_structure_parser_sees_what_it_must() {
    let s = structure(
        "# 1. T\n## A\n1. one\n2. two\n4096. wrapped\n```c\nint x;\n```\n### B\n## C\n1. x\n```text\n$ ls\nout\n```\n",
    );
    assert_eq!(s.heading_levels, vec![1, 2, 3, 2]);
    assert_eq!(s.numbered_per_section, vec![2, 1]);
    assert_eq!(s.blocks.len(), 2);
    assert!(untranslated(&s.blocks[0]) && untranslated(&s.blocks[1]));
    let prose = structure("```text\nserver  client\n```\n");
    assert!(!untranslated(&prose.blocks[0]));
    assert_eq!(
        without_comments("int x; /* uno */\nint y; // due\n/* tre\n righe */int z;"),
        "int x;\nint y;\nint z;"
    );
}

/// The slips a review of the course found (issue #20, defect 10, and the MTU budget of
/// defect 6) stay fixed: the wrong counts in English, the calques in Italian.
#[test]
fn the_reviews_slips_stay_fixed() {
    let forbidden: &[(&str, &[&str])] = &[
        (
            "en",
            &[
                "three illegal moves",
                "two helpers",
                "44 bytes of headers",
                "atomics are a hybrid",
            ],
        ),
        (
            "it",
            &[
                "scaricano",
                "cavallo da tiro",
                "la corsa",
                "ripubblica",
                "onesto fallimento",
                "ricircol",
                "a secco",
            ],
        ),
    ];
    let mut found = Vec::new();
    for (lang, words) in forbidden {
        for path in chapters(lang) {
            let text = fs::read_to_string(&path).unwrap().to_lowercase();
            for w in *words {
                if text.contains(w) {
                    found.push(format!("{}: {w:?}", path.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "slips back in the course:\n{}",
        found.join("\n")
    );
    // And the facts that replaced them are there.
    let ch4 = fs::read_to_string(lessons_src().join("en/04-queue-pairs.md")).unwrap();
    assert!(
        ch4.contains("four"),
        "chapter 4 lost its count of illegal moves"
    );
    let ch2 = fs::read_to_string(lessons_src().join("en/02-architecture.md")).unwrap();
    assert!(
        ch2.contains("96 bytes"),
        "chapter 2 lost the kernel's RoCE MTU budget"
    );
}
