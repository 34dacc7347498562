use super::*;
use crate::test_support::*;
use slidingwindow_testkit::rng::Rng;

fn random_counter(rng: &mut Rng) -> Counter {
    let unit = if rng.range(0, 1) == 0 {
        Unit::Seconds
    } else {
        Unit::Millis
    };
    let window = match rng.range(0, 2) {
        0 => rng.range(1, 100),
        1 => rng.range(1, 1 << 30),
        _ => rng.range(1, unit.max_window()),
    };
    Counter {
        unit,
        window,
        index: rng.range(0, MAX_VALUE / window),
        current: rng.magnitude(MAX_VALUE),
        previous: rng.magnitude(MAX_VALUE),
    }
}

/// One to eight counters with distinct (unit, window), sorted.
fn random_state(rng: &mut Rng) -> State {
    let n = if rng.range(0, 1) == 0 {
        1
    } else {
        rng.range(1, MAX_WINDOWS as u64) as usize
    };
    let mut list: Vec<Counter> = Vec::new();
    while list.len() < n {
        let c = random_counter(rng);
        if !list.iter().any(|o| o.sort_key() == c.sort_key()) {
            list.push(c);
        }
    }
    list.sort_by_key(Counter::sort_key);
    from_sorted(&list).expect("sorted and distinct")
}

fn counter(unit: Unit, window: u64, index: u64, current: u64, previous: u64) -> Counter {
    Counter {
        unit,
        window,
        index,
        current,
        previous,
    }
}

#[test]
fn round_trips() {
    let mut rng = Rng::new(1);
    for _ in 0..200_000 {
        let s = random_state(&mut rng);
        let e = encode(&s);
        assert!(e.as_bytes().len() >= MIN_LEN && e.as_bytes().len() <= MAX_LEN);
        let version = if s.counters().len() == 1 { 0xA1 } else { 0xA2 };
        assert_eq!(e.as_bytes()[0], version);
        assert_eq!(decode(e.as_bytes()), Ok(s));
    }
}

#[test]
fn a_typical_state_is_small() {
    // 60 s windows today: window index ~29.5 million, a few hundred requests.
    let c = counter(Unit::Seconds, 60, 29_666_666, 100, 300);
    // The example in the README: one window is version 1, byte for byte as release
    // 0.1 wrote it, so keys written before multi-limit support keep their counts.
    let e = encode(&single(c));
    let v1 = [0xa1, 0x00, 0x3c, 0xea, 0xda, 0x92, 0x0e, 0x64, 0xac, 0x02];
    assert_eq!(e.as_bytes(), &v1);
    assert_eq!(decode(&v1), Ok(single(c)));
    let ms = Counter {
        unit: Unit::Millis,
        window: 60_000,
        ..c
    };
    assert_eq!(encode(&single(ms)).as_bytes().len(), 12);
    // Two windows (10/s and 1000/h): the README's version 2 example.
    let s = from_sorted(&[
        counter(Unit::Seconds, 1, 1_780_000_000, 3, 9),
        counter(Unit::Seconds, 3600, 494_444, 120, 800),
    ])
    .unwrap();
    let v2 = [
        0xa2, 0x02, // version 2, two counters
        0x00, 0x01, 0x80, 0xca, 0xe2, 0xd0, 0x06, 0x03, 0x09, // 1 s
        0x00, 0x90, 0x1c, 0xec, 0x96, 0x1e, 0x78, 0xa0, 0x06, // 3600 s
    ];
    assert_eq!(encode(&s).as_bytes(), &v2);
    assert_eq!(decode(&v2), Ok(s));
}

#[test]
fn refuses_what_it_did_not_write() {
    let good = encode(&single(counter(Unit::Millis, 1000, 5, 1, 2)));
    let g = good.as_bytes().to_vec();
    assert!(decode(&g).is_ok());
    let with = |v: &[u8], i: usize, b: u8| {
        let mut v = v.to_vec();
        v[i] = b;
        v
    };
    assert_eq!(decode(b""), Err(DecodeError::Length));
    assert_eq!(decode(b"hello world"), Err(DecodeError::Version));
    assert_eq!(decode(b"12345678"), Err(DecodeError::Version));
    assert_eq!(decode(&with(&g, 0, 0xA3)), Err(DecodeError::Version));
    assert_eq!(decode(&with(&g, 1, 2)), Err(DecodeError::Flags));
    let mut trailing = g.clone();
    trailing.push(0);
    assert_eq!(decode(&trailing), Err(DecodeError::Trailing));
    assert_eq!(decode(&g[..g.len() - 1]), Err(DecodeError::Varint));
    // Overlong varint (5 written as 0x85 0x00) and a zero window.
    assert_eq!(
        decode(&[0xA1, 0, 0x85, 0x00, 1, 1, 1]),
        Err(DecodeError::Varint)
    );
    assert_eq!(decode(&[0xA1, 0, 0, 1, 1, 1]), Err(DecodeError::Range));
    // A count above 2^53 - 1, and an index past 2^53 - 1 units.
    let big = [
        0xA1, 0, 1, 1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x10,
    ];
    assert_eq!(decode(&big), Err(DecodeError::Varint));
    let far = [
        0xA1, 0, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 1,
    ];
    assert_eq!(decode(&far), Err(DecodeError::Range));

    // Version 2: two counters, (s, 1) and (s, 60).
    let two = [0xA2, 2, 0, 1, 5, 1, 0, 0, 60, 1, 2, 0];
    assert!(decode(&two).is_ok());
    // One counter must be version 1; more than eight cannot be.
    assert_eq!(decode(&with(&two, 1, 1)), Err(DecodeError::Count));
    assert_eq!(decode(&with(&two, 1, 9)), Err(DecodeError::Count));
    assert_eq!(decode(&with(&two, 1, 0)), Err(DecodeError::Count));
    // Fewer counters than announced, and counters out of order or repeated.
    assert_eq!(decode(&with(&two, 1, 3)), Err(DecodeError::Varint));
    let swapped = [0xA2, 2, 0, 60, 1, 2, 0, 0, 1, 5, 1, 0];
    assert_eq!(decode(&swapped), Err(DecodeError::Order));
    let repeated = [0xA2, 2, 0, 1, 5, 1, 0, 0, 1, 5, 1, 0];
    assert_eq!(decode(&repeated), Err(DecodeError::Order));
    // Seconds sort before milliseconds, whatever the window.
    let mixed = [0xA2, 2, 1, 1, 5, 1, 0, 0, 60, 1, 2, 0];
    assert_eq!(decode(&mixed), Err(DecodeError::Order));
    assert!(decode(&[0xA2, 2, 0, 60, 1, 2, 0, 1, 1, 5, 1, 0]).is_ok());
}

#[test]
fn arbitrary_bytes_never_panic_and_only_canonical_bytes_decode() {
    let mut rng = Rng::new(2);
    let mut decoded = [0usize; 2];
    for i in 0..300_000 {
        // A third pure noise (with a valid version byte half the time), the rest
        // single-byte mutations of a valid one- or many-window encoding.
        let bytes: Vec<u8> = if i % 3 == 0 {
            let len = rng.range(0, MAX_LEN as u64 + 4) as usize;
            let mut v: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if let (Some(first), true) = (v.first_mut(), i % 2 == 0) {
                *first = 0xA1 + (rng.range(0, 1) as u8);
            }
            v
        } else {
            let mut v = encode(&random_state(&mut rng)).as_bytes().to_vec();
            let at = rng.range(0, v.len() as u64 - 1) as usize;
            v[at] = rng.next_u64() as u8;
            v
        };
        if let Ok(s) = decode(&bytes) {
            decoded[usize::from(s.counters().len() > 1)] += 1;
            assert_eq!(encode(&s).as_bytes(), &bytes[..], "not canonical");
        }
    }
    assert!(
        decoded[0] > 1000 && decoded[1] > 1000,
        "mutations should often stay valid: {decoded:?}"
    );
}
