use super::*;
use std::io::Write;

#[test]
fn host_names_are_checked() {
    assert_eq!(parse_host("h1", 3), Ok(0));
    assert_eq!(parse_host("h3", 3), Ok(2));
    assert!(parse_host("h4", 3).is_err());
    assert!(parse_host("h0", 3).is_err());
    assert!(parse_host("x1", 3).is_err());
    assert!(parse_host("h", 3).is_err());
}

#[test]
fn base64_matches_the_standard() {
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    // The host's base64(1) decodes ours.
    let script = "echo \"it's $LAB_HOST\"\nexit 3\n";
    let mut child = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(base64(script.as_bytes()).as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), script);
}

#[test]
fn timestamps_are_utc_rfc3339() {
    let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_054_400_123);
    assert_eq!(utc_timestamp(t), "2026-11-30T16:00:00.123Z");
    assert_eq!(
        utc_timestamp(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400)),
        "2000-02-29T00:00:00.000Z"
    );
}

#[test]
fn status_lines_parse() {
    let s =
        parse_status("3 hosts\nh1 Ready boot=1 link=up\nh2 Killed boot=1 link=up\npartition h1 h2");
    assert_eq!(s.len(), 2);
    assert!(s["h2"].starts_with("Killed"));
}
