//! One type of each shape, and every behaviour the macro generates for it.

crate::code_names! {
    /// A closed set.
    pub enum Colour {
        /// First.
        Red => "red",
        /// Second.
        DarkBlue => "dark-blue",
    }
}

crate::code_names! {
    /// Codes with a catch-all, one of them from a table.
    pub enum Speed: i32 {
        /// Slow.
        Slow = 1 => "SLOW",
        /// Fast.
        Fast = 4 => crate::QP_STATE_NAMES[3],
    }
}

crate::code_names! {
    /// A newtype with a list.
    pub struct Kind(u8) else "UNKNOWN" { 0 => "ZERO", 0xff => "ALL_ONES" }
}

crate::code_names! {
    /// A newtype with a lookup function.
    pub struct State(u8) else "unknown" = |code: u8| crate::qp_state_name(code.into());
}

#[test]
fn a_closed_set_names_and_parses_its_values_in_declaration_order() {
    assert_eq!(Colour::ALL, &[Colour::Red, Colour::DarkBlue]);
    assert_eq!(Colour::NAMES, &["red", "dark-blue"]);
    assert_eq!(Colour::DarkBlue.as_str(), "dark-blue");
    assert_eq!(Colour::DarkBlue.to_string(), "dark-blue");
    assert_eq!(Colour::parse("dark-blue"), Some(Colour::DarkBlue));
    assert_eq!(Colour::parse("red"), Some(Colour::Red));
    // Only the exact spelling parses.
    assert_eq!(Colour::parse("Red"), None);
    assert_eq!(Colour::parse("DarkBlue"), None);
    assert_eq!(Colour::parse(""), None);
    assert!(Colour::Red < Colour::DarkBlue);
}

#[test]
fn a_closed_set_serializes_and_deserializes_its_spelling() {
    assert_eq!(
        serde_json::to_string(&[Colour::Red, Colour::DarkBlue]).unwrap(),
        r#"["red","dark-blue"]"#
    );
    let back: Vec<Colour> = serde_json::from_str(r#"["dark-blue","red"]"#).unwrap();
    assert_eq!(back, [Colour::DarkBlue, Colour::Red]);
    // A wrong spelling names the allowed ones.
    let err = serde_json::from_str::<Colour>(r#""green""#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown variant `green`"), "{err}");
    assert!(err.contains("expected `red` or `dark-blue`"), "{err}");
}

#[test]
fn codes_convert_both_ways_and_keep_unknown_values() {
    assert_eq!(Speed::ALL, &[Speed::Slow, Speed::Fast]);
    assert_eq!(Speed::from_raw(1), Speed::Slow);
    assert_eq!(Speed::from_raw(4), Speed::Fast);
    assert_eq!(Speed::Fast.raw(), 4);
    assert_eq!(Speed::Fast.name(), "RTS");
    assert_eq!(Speed::Slow.to_string(), "SLOW");
    for raw in [0, 2, 3, -1, i32::MAX] {
        let unknown = Speed::from_raw(raw);
        assert_eq!(unknown, Speed::Unknown(raw));
        assert_eq!(unknown.raw(), raw);
        assert_eq!(unknown.name(), "unknown");
        assert_eq!(unknown.to_string(), format!("unknown ({raw})"));
    }
}

#[test]
fn codes_serialize_as_their_display_string() {
    assert_eq!(
        serde_json::to_string(&[Speed::Slow, Speed::Fast, Speed::Unknown(-7)]).unwrap(),
        r#"["SLOW","RTS","unknown (-7)"]"#
    );
}

#[test]
fn a_newtype_names_listed_codes_and_gives_its_placeholder_for_others() {
    assert_eq!(Kind(0).name(), "ZERO");
    assert_eq!(Kind(0xff).name(), "ALL_ONES");
    assert_eq!(Kind(1).name(), "UNKNOWN");
    assert_eq!(Kind(0xff).to_string(), "ALL_ONES");
    assert_eq!(Kind(7).to_string(), "UNKNOWN");
    // The code stays readable.
    assert_eq!(Kind(7).0, 7);
}

#[test]
fn a_newtype_names_codes_by_its_lookup() {
    assert_eq!(State(3).name(), "RTS");
    assert_eq!(State(6).to_string(), "ERR");
    assert_eq!(State(7).name(), "unknown");
    assert_eq!(State(200).to_string(), "unknown");
}

#[test]
fn a_newtype_serializes_as_its_name() {
    assert_eq!(
        serde_json::to_string(&(Kind(0), Kind(9), State(3), State(9))).unwrap(),
        r#"["ZERO","UNKNOWN","RTS","unknown"]"#
    );
}
