//! Parsers for the raw answers of the ethtool ioctl (include/uapi/linux/ethtool.h), in the
//! byte order of the machine that produced them (native: the kernel writes host structs).
//!
//! - `struct ethtool_drvinfo` (196 bytes): `cmd` u32, `driver[32]`, `version[32]`,
//!   `fw_version[32]`, `bus_info[32]`, `erom_version[32]`, `reserved2[12]`, then the u32s
//!   `n_priv_flags`, `n_stats` (offset 180), `testinfo_len`, `eedump_len`, `regdump_len`;
//! - `struct ethtool_gstrings`: `cmd`, `string_set`, `len` (u32 each), then `len` names of
//!   `ETH_GSTRING_LEN` = 32 bytes, NUL-padded (a name of exactly 32 bytes has no NUL);
//! - `struct ethtool_stats`: `cmd`, `n_stats` (u32 each), then `n_stats` u64 values.

use super::EthtoolError;

/// `ETH_GSTRING_LEN`.
pub const GSTRING_LEN: usize = 32;
/// `sizeof(struct ethtool_drvinfo)`.
pub const DRVINFO_LEN: usize = 196;
/// Header of `struct ethtool_gstrings`.
pub const GSTRINGS_HEADER: usize = 12;
/// Header of `struct ethtool_stats`.
pub const STATS_HEADER: usize = 8;

/// What `ETHTOOL_GDRVINFO` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverInfo {
    /// The driver (`mlx5_core`, `bnxt_en`, `ice`, `virtio_net`, `veth`).
    pub driver: String,
    /// Firmware version as the driver prints it.
    pub fw_version: String,
    /// Bus address (`0000:5e:00.0`), empty for virtual devices.
    pub bus_info: String,
    /// How many driver statistics `ETHTOOL_GSTATS` returns.
    pub n_stats: u32,
}

fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    let raw = bytes.get(offset..offset + 4)?;
    Some(u32::from_ne_bytes(raw.try_into().ok()?))
}

/// A fixed-size, NUL-padded C string field as text (lossy: drivers write ASCII).
fn c_string(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn malformed(call: &'static str, what: String) -> EthtoolError {
    EthtoolError::Malformed { call, what }
}

/// Parse a `struct ethtool_drvinfo` answer.
pub fn drvinfo(bytes: &[u8]) -> Result<DriverInfo, EthtoolError> {
    if bytes.len() < DRVINFO_LEN {
        return Err(malformed(
            "GDRVINFO",
            format!("{} bytes, expected {DRVINFO_LEN}", bytes.len()),
        ));
    }
    Ok(DriverInfo {
        driver: c_string(&bytes[4..36]),
        fw_version: c_string(&bytes[68..100]),
        bus_info: c_string(&bytes[100..132]),
        n_stats: u32_at(bytes, 180).unwrap_or(0),
    })
}

/// Parse a `struct ethtool_gstrings` answer: the names, in the driver's order.
pub fn gstrings(bytes: &[u8]) -> Result<Vec<String>, EthtoolError> {
    let len = u32_at(bytes, 8)
        .ok_or_else(|| malformed("GSTRINGS", format!("{} bytes, no header", bytes.len())))?;
    let len = len as usize;
    let need = len
        .checked_mul(GSTRING_LEN)
        .and_then(|n| n.checked_add(GSTRINGS_HEADER))
        .ok_or_else(|| malformed("GSTRINGS", format!("impossible count {len}")))?;
    if bytes.len() < need {
        return Err(malformed(
            "GSTRINGS",
            format!("{len} names need {need} bytes, got {}", bytes.len()),
        ));
    }
    Ok(bytes[GSTRINGS_HEADER..need]
        .chunks_exact(GSTRING_LEN)
        .map(c_string)
        .collect())
}

/// How many bytes a `struct ethtool_gstrings` answer says it holds (0 without a header).
pub fn gstrings_len(bytes: &[u8]) -> usize {
    u32_at(bytes, 8).map_or(0, |n| {
        (n as usize)
            .saturating_mul(GSTRING_LEN)
            .saturating_add(GSTRINGS_HEADER)
    })
}

/// How many bytes a `struct ethtool_stats` answer says it holds (0 without a header).
pub fn gstats_len(bytes: &[u8]) -> usize {
    u32_at(bytes, 4).map_or(0, |n| {
        (n as usize).saturating_mul(8).saturating_add(STATS_HEADER)
    })
}

/// Parse a `struct ethtool_stats` answer: the values, in the driver's order.
pub fn gstats(bytes: &[u8]) -> Result<Vec<u64>, EthtoolError> {
    let n = u32_at(bytes, 4)
        .ok_or_else(|| malformed("GSTATS", format!("{} bytes, no header", bytes.len())))?;
    let n = n as usize;
    let need = n
        .checked_mul(8)
        .and_then(|b| b.checked_add(STATS_HEADER))
        .ok_or_else(|| malformed("GSTATS", format!("impossible count {n}")))?;
    if bytes.len() < need {
        return Err(malformed(
            "GSTATS",
            format!("{n} values need {need} bytes, got {}", bytes.len()),
        ));
    }
    Ok(bytes[STATS_HEADER..need]
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().expect("chunks of 8")))
        .collect())
}

/// Pair names and values; the two answers must agree on the count (a driver whose count
/// changed between the calls gives an error, retried by the caller).
pub fn pair(names: Vec<String>, values: Vec<u64>) -> Result<Vec<(String, u64)>, EthtoolError> {
    if names.len() != values.len() {
        return Err(EthtoolError::CountChanged {
            names: names.len(),
            values: values.len(),
        });
    }
    Ok(names.into_iter().zip(values).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gstrings_bytes(names: &[&str]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(0x1bu32.to_ne_bytes());
        b.extend(1u32.to_ne_bytes());
        b.extend((names.len() as u32).to_ne_bytes());
        for n in names {
            let mut field = [0u8; GSTRING_LEN];
            field[..n.len()].copy_from_slice(n.as_bytes());
            b.extend(field);
        }
        b
    }

    #[test]
    fn strings_and_stats_pair_up() {
        let names = gstrings(&gstrings_bytes(&["rx_packets", "tx_prio3_pause"])).unwrap();
        let mut stats = Vec::new();
        stats.extend(0x1du32.to_ne_bytes());
        stats.extend(2u32.to_ne_bytes());
        stats.extend(5u64.to_ne_bytes());
        stats.extend(u64::MAX.to_ne_bytes());
        let values = gstats(&stats).unwrap();
        assert_eq!(
            pair(names, values).unwrap(),
            [
                ("rx_packets".to_string(), 5),
                ("tx_prio3_pause".to_string(), u64::MAX)
            ]
        );
    }

    #[test]
    fn a_full_length_name_has_no_nul() {
        let name = "x".repeat(GSTRING_LEN);
        assert_eq!(gstrings(&gstrings_bytes(&[&name])).unwrap(), [name]);
    }

    #[test]
    fn short_answers_and_count_changes_are_errors() {
        let mut b = gstrings_bytes(&["a", "b"]);
        b.truncate(b.len() - 1);
        assert!(matches!(
            gstrings(&b),
            Err(EthtoolError::Malformed {
                call: "GSTRINGS",
                ..
            })
        ));
        assert!(matches!(
            gstats(&[0; 4]),
            Err(EthtoolError::Malformed { call: "GSTATS", .. })
        ));
        assert!(matches!(
            drvinfo(&[0; 100]),
            Err(EthtoolError::Malformed {
                call: "GDRVINFO",
                ..
            })
        ));
        assert!(matches!(
            pair(vec!["a".into()], vec![]),
            Err(EthtoolError::CountChanged {
                names: 1,
                values: 0
            })
        ));
    }

    #[test]
    fn drvinfo_fields() {
        let mut b = vec![0u8; DRVINFO_LEN];
        b[4..14].copy_from_slice(b"mlx5_core\0");
        b[100..112].copy_from_slice(b"0000:5e:00.0");
        b[180..184].copy_from_slice(&42u32.to_ne_bytes());
        let info = drvinfo(&b).unwrap();
        assert_eq!(info.driver, "mlx5_core");
        assert_eq!(info.bus_info, "0000:5e:00.0");
        assert_eq!(info.n_stats, 42);
    }
}
