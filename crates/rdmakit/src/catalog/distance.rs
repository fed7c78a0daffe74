//! Edit distance for "did you mean": the optimal-string-alignment distance (insertions,
//! deletions, substitutions and swaps of two neighbouring characters each cost 1), compared
//! without regard to ASCII case because counter names mix cases (`RxECNMrkd`, `rx_pkts`).

/// The number of single-character edits (including swapping two neighbours) that turn `a`
/// into `b`, ignoring ASCII case.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
    let width = b.len() + 1;
    // Three rows of the dynamic-programming table: two back (for swaps), one back, current.
    let mut two_back = vec![0usize; width];
    let mut one_back: Vec<usize> = (0..width).collect();
    let mut current = vec![0usize; width];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (one_back[j] + 1) // delete from a
                .min(current[j - 1] + 1) // insert into a
                .min(one_back[j - 1] + cost); // substitute (or keep)
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(two_back[j - 2] + 1); // swap two neighbours
            }
            current[j] = best;
        }
        std::mem::swap(&mut two_back, &mut one_back);
        std::mem::swap(&mut one_back, &mut current);
    }
    one_back[b.len()]
}

/// The largest distance still worth suggesting for a query of this length: short names allow
/// two edits, longer ones about a third of their length.
pub fn max_suggestion_distance(query: &str) -> usize {
    (query.chars().count() / 3).max(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_kind_of_edit_once() {
        assert_eq!(edit_distance("rnr", "rnr"), 0);
        assert_eq!(edit_distance("sent_pkts", "sent_pkt"), 1); // deletion
        assert_eq!(edit_distance("sent_pkt", "sent_pkts"), 1); // insertion
        assert_eq!(edit_distance("rcvd_pkts", "rcvd_pkis"), 1); // substitution
        assert_eq!(edit_distance("out_of_bufefr", "out_of_buffer"), 1); // swap
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn ignores_ascii_case() {
        assert_eq!(edit_distance("rxecnmrkd", "RxECNMrkd"), 0);
    }

    #[test]
    fn threshold_grows_with_length() {
        assert_eq!(max_suggestion_distance("rnr"), 2);
        assert_eq!(max_suggestion_distance("local_ack_timeout_err"), 7);
    }
}
