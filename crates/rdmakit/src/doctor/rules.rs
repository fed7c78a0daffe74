//! The doctor's rules, loaded from `catalog/rules.toml` (embedded) and validated.

use serde::Deserialize;

use crate::catalog::{Catalog, Experiment, Severity};

const EMBEDDED: &str = include_str!("../../../../catalog/rules.toml");

/// One rule: "when these counters rise together by at least N, this is what it means".
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Unique id.
    pub id: String,
    /// Short title.
    pub title: String,
    /// Counter names (any driver family).
    pub counters: Vec<String>,
    /// The summed delta that makes it fire.
    pub min_delta: u64,
    /// How serious.
    pub severity: Severity,
    /// What happened; `{target}` is replaced by `device/port`.
    pub finding: String,
    /// What to do.
    pub advice: String,
    /// The experiment that reproduces it.
    pub experiment: Option<String>,
}

/// All rules, in file order.
#[derive(Debug, Clone)]
pub struct Rules(Vec<Rule>);

/// A rules file that does not load.
#[derive(Debug, thiserror::Error)]
#[error("rules.toml: {0}")]
pub struct RuleError(String);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    rule: Vec<RawRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    id: String,
    title: String,
    counters: Vec<String>,
    #[serde(default = "one")]
    min_delta: u64,
    severity: String,
    finding: String,
    advice: String,
    experiment: Option<String>,
}

fn one() -> u64 {
    1
}

impl Rules {
    /// The rules compiled into this binary.
    pub fn embedded() -> Result<Rules, RuleError> {
        Rules::parse(EMBEDDED)
    }

    /// Parse and validate a rules file.
    pub fn parse(text: &str) -> Result<Rules, RuleError> {
        let file: File = toml::from_str(text).map_err(|e| RuleError(e.to_string()))?;
        let mut rules = Vec::new();
        for r in file.rule {
            let ctx = |m: &str| RuleError(format!("rule {}: {m}", r.id));
            if rules.iter().any(|x: &Rule| x.id == r.id) {
                return Err(ctx("duplicate id"));
            }
            if r.counters.is_empty() {
                return Err(ctx("no counters"));
            }
            if r.finding.trim().is_empty() || r.advice.trim().is_empty() {
                return Err(ctx("empty finding or advice"));
            }
            let severity = Severity::parse(&r.severity)
                .ok_or_else(|| ctx(&format!("unknown severity {:?}", r.severity)))?;
            if let Some(e) = &r.experiment {
                Experiment::parse(e).ok_or_else(|| ctx(&format!("unknown experiment {e:?}")))?;
            }
            rules.push(Rule {
                id: r.id,
                title: r.title,
                counters: r.counters,
                min_delta: r.min_delta.max(1),
                severity,
                finding: r.finding,
                advice: r.advice,
                experiment: r.experiment,
            });
        }
        Ok(Rules(rules))
    }

    /// The rules in order.
    pub fn iter(&self) -> impl Iterator<Item = &Rule> {
        self.0.iter()
    }

    /// Counter names used by a rule that no catalog family describes.
    pub fn unknown_counters(&self, catalog: &Catalog) -> Vec<String> {
        let mut out = Vec::new();
        for r in &self.0 {
            for c in &r.counters {
                if catalog.by_name(c).is_empty() {
                    out.push(format!("{}: {c}", r.id));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_rules_load_and_name_catalog_counters() {
        let rules = Rules::embedded().unwrap();
        assert!(rules.iter().count() >= 10);
        let catalog = Catalog::embedded().unwrap();
        assert_eq!(rules.unknown_counters(catalog), Vec::<String>::new());
    }

    #[test]
    fn bad_rules_are_rejected_with_the_rule_named() {
        let base = "[[rule]]\nid = \"a\"\ntitle = \"t\"\ncounters = [\"x\"]\nseverity = \"warning\"\nfinding = \"f\"\nadvice = \"a\"\n";
        assert!(Rules::parse(base).is_ok());
        let e = Rules::parse(&base.replace("warning", "scary")).unwrap_err();
        assert!(
            e.to_string().contains("rule a") && e.to_string().contains("scary"),
            "{e}"
        );
        let e = Rules::parse(&format!("{base}{base}")).unwrap_err();
        assert!(e.to_string().contains("duplicate"), "{e}");
        let e = Rules::parse(&format!("{base}bogus = 1\n")).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = Rules::parse(&base.replace("[\"x\"]", "[]")).unwrap_err();
        assert!(e.to_string().contains("no counters"), "{e}");
    }
}
