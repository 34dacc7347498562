use super::*;
use crate::test_support::parse;
use slidingwindow_testkit::rng::Rng;

fn p(s: &str) -> Result<Parsed, ArgError> {
    let words: Vec<&[u8]> = s.split(' ').map(str::as_bytes).collect();
    parse(&words)
}

fn lim(limit: u64, window: u64) -> Limit {
    Limit { limit, window }
}

fn msg(s: &str) -> String {
    p(s).unwrap_err().to_string()
}

#[test]
fn minimal_and_full_forms() {
    let one = p("100 60").unwrap();
    assert_eq!(one.limits(), [lim(100, 60)]);
    assert_eq!(
        (one.unit, one.now, one.cost, one.details),
        (Unit::Seconds, None, 1, false)
    );
    let full = p("0 1500 1700000000000 details cost 3 Ms").unwrap();
    assert_eq!(full.limits(), [lim(0, 1500)]);
    assert_eq!(
        (full.unit, full.now, full.cost, full.details),
        (Unit::Millis, Some(1_700_000_000_000), 3, true)
    );
    assert_eq!(p("5 60 COST 2").unwrap().now, None);
    assert_eq!(p("5 60 007").unwrap().now, Some(7));
}

#[test]
fn server_clock_is_floored_to_the_unit() {
    let parsed = p("5 60").unwrap();
    assert_eq!(parsed.request(1_700_000_000_999).now, 1_700_000_000);
    let parsed = p("5 60 MS").unwrap();
    assert_eq!(parsed.request(1_700_000_000_999).now, 1_700_000_000_999);
    assert_eq!(p("5 60 42").unwrap().request(7_000).now, 42);
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
        "ERR unknown option 'FOO' (expected LIMIT, COST, MS or DETAILS)"
    );
    assert_eq!(
        msg("5 60 10 20"),
        "ERR unknown option '20' (expected LIMIT, COST, MS or DETAILS)"
    );
    assert_eq!(
        msg("5 60 10 MS 99"),
        "ERR unknown option '99' (expected LIMIT, COST, MS or DETAILS)"
    );
}

#[test]
fn unknown_options_are_shown_safely() {
    let arg: &[u8] = b"a\r\nb\0c";
    let e = parse(&[b"1", b"1", arg]).unwrap_err().to_string();
    assert_eq!(
        e,
        "ERR unknown option 'a??b?c' (expected LIMIT, COST, MS or DETAILS)"
    );
    let long = vec![b'x'; 100];
    let e = parse(&[b"1", b"1", &long]).unwrap_err().to_string();
    assert!(e.contains(&format!("'{}...'", "x".repeat(32))), "{e}");
}

#[test]
fn arbitrary_argument_vectors_never_panic() {
    let words: [&[u8]; 16] = [
        b"LIMIT",
        b"limit",
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
        // Half short vectors, half long enough for several LIMITs.
        let longest = [8, 24][rng.range(0, 1) as usize];
        let n = rng.range(0, longest) as usize;
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
                assert!(parsed.cost >= 1 && parsed.cost <= MAX_VALUE);
                let limits = parsed.limits();
                assert!(!limits.is_empty() && limits.len() <= MAX_LIMITS);
                for (i, l) in limits.iter().enumerate() {
                    assert!(l.limit <= MAX_VALUE);
                    assert!(l.window >= 1 && l.window <= parsed.unit.max_window());
                    assert!(limits[..i].iter().all(|o| o.window != l.window));
                }
            }
            Err(e) => assert!(e.to_string().starts_with("ERR ")),
        }
    }
    assert!(ok > 250, "some vectors must parse: {ok}");
}

#[test]
fn several_limits_in_any_order_and_case() {
    let parsed = p("10 1 100 LIMIT 1000 3600 cost 2 limit 50 60 MS").unwrap();
    assert_eq!(parsed.limits(), [lim(10, 1), lim(1000, 3600), lim(50, 60)]);
    assert_eq!(
        (parsed.now, parsed.cost, parsed.unit),
        (Some(100), 2, Unit::Millis)
    );
    // Eight in all is the most.
    let eight = format!(
        "1 1{}",
        (2..=8).map(|w| format!(" LIMIT 1 {w}")).collect::<String>()
    );
    assert_eq!(p(&eight).unwrap().limits().len(), 8);
    assert_eq!(
        msg(&format!("{eight} LIMIT 1 9")),
        "ERR at most 8 limits per call (the positional one and each LIMIT)"
    );
}

#[test]
fn limit_errors_name_the_problem() {
    let max = "9007199254740991";
    assert_eq!(msg("5 60 LIMIT"), "ERR LIMIT needs a limit and a window");
    assert_eq!(msg("5 60 LIMIT 5"), "ERR LIMIT needs a limit and a window");
    assert_eq!(
        msg("5 60 LIMIT x 10"),
        format!("ERR limit must be an integer from 0 to {max}")
    );
    assert_eq!(
        msg("5 60 LIMIT 5 0"),
        "ERR window must be an integer from 1 to 9007199254740 seconds"
    );
    // The MS bound applies to every window, MS given before or after.
    assert!(p("5 60 LIMIT 5 9007199254741 MS").is_ok());
    assert!(p("5 60 LIMIT 5 9007199254741").is_err());
    assert_eq!(
        msg("5 60 LIMIT 7 60"),
        "ERR two limits have the same window (60 seconds): give each window once"
    );
    assert_eq!(
        msg("5 60 LIMIT 7 10 LIMIT 8 10 MS"),
        "ERR two limits have the same window (10 milliseconds): give each window once"
    );
}

#[test]
fn counts_arguments() {
    let q = |s: &str| {
        let words: Vec<&[u8]> = s.split(' ').map(str::as_bytes).collect();
        parse_counts(&words)
    };
    assert_eq!(
        q("60"),
        Ok(CountsQuery {
            window: 60,
            unit: Unit::Seconds,
            now: None
        })
    );
    assert_eq!(
        q("1500 99 ms"),
        Ok(CountsQuery {
            window: 1500,
            unit: Unit::Millis,
            now: Some(99)
        })
    );
    let err = |s: &str| q(s).unwrap_err().to_string();
    assert_eq!(
        err("0"),
        "ERR window must be an integer from 1 to 9007199254740 seconds"
    );
    assert_eq!(err("60 MS MS"), "ERR MS given more than once");
    assert_eq!(
        err("60 DETAILS"),
        "ERR unknown option 'DETAILS' (expected MS)"
    );
    assert_eq!(
        err("60 -1"),
        "ERR now must be an integer from 0 to 9007199254740991"
    );
    assert_eq!(parse_counts(&[]), Err(ArgError::Arity));
}
