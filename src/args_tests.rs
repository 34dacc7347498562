use super::*;
use crate::testrng::Rng;

fn p(s: &str) -> Result<Parsed, ArgError> {
    let words: Vec<&[u8]> = s.split(' ').map(str::as_bytes).collect();
    parse(&words)
}

fn msg(s: &str) -> String {
    p(s).unwrap_err().to_string()
}

#[test]
fn minimal_and_full_forms() {
    assert_eq!(
        p("100 60"),
        Ok(Parsed {
            limit: 100,
            window: 60,
            unit: Unit::Seconds,
            now: None,
            cost: 1,
            details: false
        })
    );
    assert_eq!(
        p("0 1500 1700000000000 details cost 3 Ms"),
        Ok(Parsed {
            limit: 0,
            window: 1500,
            unit: Unit::Millis,
            now: Some(1_700_000_000_000),
            cost: 3,
            details: true
        })
    );
    assert_eq!(p("5 60 COST 2").unwrap().now, None);
    assert_eq!(p("5 60 007").unwrap().now, Some(7));
}

#[test]
fn server_clock_is_floored_to_the_unit() {
    let parsed = p("5 60").unwrap();
    assert_eq!(parsed.request(|| 1_700_000_000_999).now, 1_700_000_000);
    let parsed = p("5 60 MS").unwrap();
    assert_eq!(parsed.request(|| 1_700_000_000_999).now, 1_700_000_000_999);
    assert_eq!(p("5 60 42").unwrap().request(|| unreachable!()).now, 42);
}

#[test]
fn every_error_names_its_argument() {
    let max = "9007199254740991";
    assert_eq!(msg("5"), "ERR wrong number of arguments");
    assert_eq!(
        msg("-1 60"),
        format!("ERR limit must be an integer from 0 to {max}")
    );
    assert_eq!(
        msg("ten 60"),
        format!("ERR limit must be an integer from 0 to {max}")
    );
    assert_eq!(
        msg("9007199254740992 60"),
        format!("ERR limit must be an integer from 0 to {max}")
    );
    assert_eq!(
        msg("5 0"),
        "ERR window must be an integer from 1 to 9007199254740 seconds"
    );
    // 2^62 seconds would overflow the expiry arithmetic.
    assert_eq!(
        msg("5 4611686018427387904"),
        "ERR window must be an integer from 1 to 9007199254740 seconds"
    );
    assert_eq!(
        msg("5 9007199254740992 MS"),
        format!("ERR window must be an integer from 1 to {max} milliseconds (MS)")
    );
    assert_eq!(
        msg("5 60 1.5"),
        format!("ERR now must be an integer from 0 to {max}")
    );
    assert_eq!(
        msg("5 60 -3"),
        format!("ERR now must be an integer from 0 to {max}")
    );
    assert_eq!(
        msg("5 60 COST 0"),
        format!("ERR cost must be an integer from 1 to {max}")
    );
    assert_eq!(
        msg("5 60 COST 9223372036854775807"),
        format!("ERR cost must be an integer from 1 to {max}")
    );
    assert_eq!(msg("5 60 COST"), "ERR COST needs a value");
    assert_eq!(msg("5 60 COST 1 cost 2"), "ERR COST given more than once");
    assert_eq!(msg("5 60 MS ms"), "ERR MS given more than once");
    assert_eq!(
        msg("5 60 DETAILS DETAILS"),
        "ERR DETAILS given more than once"
    );
    assert_eq!(
        msg("5 60 FOO"),
        "ERR unknown option 'FOO' (expected COST, MS or DETAILS)"
    );
    assert_eq!(
        msg("5 60 10 20"),
        "ERR unknown option '20' (expected COST, MS or DETAILS)"
    );
    assert_eq!(
        msg("5 60 10 MS 99"),
        "ERR unknown option '99' (expected COST, MS or DETAILS)"
    );
}

#[test]
fn unknown_options_are_shown_safely() {
    let arg: &[u8] = b"a\r\nb\0c";
    let e = parse(&[b"1", b"1", arg]).unwrap_err().to_string();
    assert_eq!(
        e,
        "ERR unknown option 'a??b?c' (expected COST, MS or DETAILS)"
    );
    let long = vec![b'x'; 100];
    let e = parse(&[b"1", b"1", &long]).unwrap_err().to_string();
    assert!(e.contains(&format!("'{}...'", "x".repeat(32))), "{e}");
}

#[test]
fn arbitrary_argument_vectors_never_panic() {
    let words: [&[u8]; 14] = [
        b"COST",
        b"cost",
        b"MS",
        b"details",
        b"0",
        b"1",
        b"60",
        b"-1",
        b"1.5",
        b"",
        b"9007199254740991",
        b"9007199254740992",
        b"99999999999999999999999",
        b"\xff\x00",
    ];
    let mut rng = Rng::new(3);
    let mut ok = 0;
    for _ in 0..200_000 {
        let n = rng.range(0, 8) as usize;
        let args: Vec<Vec<u8>> = (0..n)
            .map(|_| match rng.range(0, 3) {
                0 => (0..rng.range(0, 6)).map(|_| rng.next_u64() as u8).collect(),
                _ => words[rng.range(0, words.len() as u64 - 1) as usize].to_vec(),
            })
            .collect();
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        match parse(&refs) {
            Ok(parsed) => {
                ok += 1;
                assert!(parsed.limit <= MAX_VALUE && parsed.cost >= 1);
                assert!(parsed.window >= 1 && parsed.window <= parsed.unit.max_window());
            }
            Err(e) => assert!(e.to_string().starts_with("ERR ")),
        }
    }
    assert!(ok > 500, "some vectors must parse: {ok}");
}
