//! HELP text for counter metrics, from the counter catalog (`rdmakit::catalog`).
//!
//! The family is the one `Catalog::family_of` finds (the one whose kind and unit the counter
//! already carries): `ib_pma` for `counters/` files; for driver files the parent's kernel
//! driver's (`mlx5_core` -> `mlx5`), else the device name's (`rxe0` -> `rxe`,
//! `bnxt_re0` -> `bnxt_re`). A counter the catalog does not describe still gets a useful HELP
//! line naming its sysfs file. Every HELP line ends with the file it comes from and any unit
//! conversion rdmad applied, so a reader of `/metrics` can find the raw value.

use rdmakit::catalog::Catalog;
use rdmakit::model::{Counter, CounterSource, Unit};

/// The HELP text for `counter` of `device` (whose parent driver is `driver`, if known).
pub fn counter_help(device: &str, driver: Option<&str>, counter: &Counter) -> String {
    family_counter_help(counter_family(device, driver, counter.source), counter)
}

/// The catalog family whose entries describe the `source` counters of `device` (whose
/// parent driver is `driver`): the HELP of a counter depends on it and on the counter only.
pub fn counter_family(
    device: &str,
    driver: Option<&str>,
    source: CounterSource,
) -> Option<&'static str> {
    Catalog::embedded()
        .ok()
        .and_then(|c| c.family_of(source, device, driver))
}

/// The HELP text for `counter` read from a device of the catalog family `family`.
pub fn family_counter_help(family: Option<&str>, counter: &Counter) -> String {
    let summary = summary(family, counter);
    let location = match counter.source {
        CounterSource::Pma => "ports/<n>/counters",
        CounterSource::Hw => "ports/<n>/hw_counters",
        CounterSource::DeviceHw => "hw_counters",
    };
    let conversion = match counter.unit {
        Unit::Words4 => "; exported in bytes (4 x the 4-octet words in the file)",
        Unit::Ms => "; exported in seconds (the file is in ms)",
        Unit::Us => "; exported in seconds (the driver counts us)",
        _ => "",
    };
    format!("{summary} (sysfs {location}/{}{conversion})", counter.name)
}

/// The HELP text of a curated netdev family (catalog family `netdev`).
pub fn netdev_help(info: &rdmakit::catalog::CounterInfo) -> String {
    let conversion = match info.unit {
        Unit::Us => "; exported in seconds (the driver counts us)",
        Unit::Ms => "; exported in seconds (the driver counts ms)",
        _ => "",
    };
    format!(
        "{} (driver statistics of the port's netdev, ethtool -S{conversion})",
        info.summary.trim_end_matches('.')
    )
}

fn summary(family: Option<&str>, counter: &Counter) -> String {
    let fallback = || match counter.source {
        CounterSource::Pma => "InfiniBand port counter".to_string(),
        CounterSource::Hw | CounterSource::DeviceHw => {
            "Driver counter, not described in the rdmad catalog".to_string()
        }
    };
    let Ok(catalog) = Catalog::embedded() else {
        return fallback();
    };
    family
        .and_then(|f| catalog.get(f, &counter.name))
        .map(|info| info.summary.trim_end_matches('.').to_string())
        .unwrap_or_else(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pma_help_comes_from_the_catalog_and_names_the_conversion() {
        let c = Counter::new("port_xmit_data", CounterSource::Pma, 1);
        let help = counter_help("mlx5_0", Some("mlx5_core"), &c);
        assert!(help.starts_with("Data sent"), "{help}");
        assert!(help.ends_with(
            "(sysfs ports/<n>/counters/port_xmit_data; exported in bytes (4 x the 4-octet words in the file))"
        ));
    }

    #[test]
    fn driver_family_from_driver_or_device_name() {
        let c = Counter::new("sent_pkts", CounterSource::Hw, 1);
        let rxe = counter_help("rxe_a", None, &c);
        assert!(!rxe.starts_with("Driver counter"), "{rxe}");
        let c = Counter::new("out_of_buffer", CounterSource::Hw, 1);
        let mlx = counter_help("mlx5_0", Some("mlx5_core"), &c);
        assert!(!mlx.starts_with("Driver counter"), "{mlx}");
    }

    #[test]
    fn unknown_counter_still_gets_help() {
        let c = Counter::new("brand_new_counter", CounterSource::Hw, 1);
        let help = counter_help("mlx5_0", Some("mlx5_core"), &c);
        assert_eq!(
            help,
            "Driver counter, not described in the rdmad catalog (sysfs ports/<n>/hw_counters/brand_new_counter)"
        );
    }
}
