use super::*;
use crate::testrng::Rng;

fn random_state(rng: &mut Rng) -> State {
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
    State {
        unit,
        window,
        index: rng.range(0, MAX_VALUE / window),
        current: rng.magnitude(MAX_VALUE),
        previous: rng.magnitude(MAX_VALUE),
    }
}

#[test]
fn round_trips() {
    let mut rng = Rng::new(1);
    for _ in 0..200_000 {
        let s = random_state(&mut rng);
        let e = encode(&s);
        assert!(e.as_bytes().len() >= MIN_LEN && e.as_bytes().len() <= MAX_LEN);
        assert_eq!(decode(e.as_bytes()), Ok(s));
    }
}

#[test]
fn a_typical_state_is_small() {
    // 60 s windows today: window index ~29.5 million, a few hundred requests.
    let s = State {
        unit: Unit::Seconds,
        window: 60,
        index: 29_666_666,
        current: 100,
        previous: 300,
    };
    // The example in the README.
    let e = encode(&s);
    assert_eq!(
        e.as_bytes(),
        &[0xa1, 0x00, 0x3c, 0xea, 0xda, 0x92, 0x0e, 0x64, 0xac, 0x02]
    );
    let ms = State {
        unit: Unit::Millis,
        window: 60_000,
        ..s
    };
    assert_eq!(encode(&ms).as_bytes().len(), 12);
}

#[test]
fn refuses_what_it_did_not_write() {
    let good = encode(&State {
        unit: Unit::Millis,
        window: 1000,
        index: 5,
        current: 1,
        previous: 2,
    });
    let g = good.as_bytes().to_vec();
    assert!(decode(&g).is_ok());
    let with = |i: usize, b: u8| {
        let mut v = g.clone();
        v[i] = b;
        v
    };
    assert_eq!(decode(b""), Err(DecodeError::Length));
    assert_eq!(decode(b"hello world"), Err(DecodeError::Version));
    assert_eq!(decode(b"12345678"), Err(DecodeError::Version));
    assert_eq!(decode(&with(0, 0xA2)), Err(DecodeError::Version));
    assert_eq!(decode(&with(1, 2)), Err(DecodeError::Flags));
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
}

#[test]
fn arbitrary_bytes_never_panic_and_only_canonical_bytes_decode() {
    let mut rng = Rng::new(2);
    let mut decoded = 0;
    for i in 0..300_000 {
        // Half pure noise, half single-byte mutations of a valid encoding.
        let bytes: Vec<u8> = if i % 2 == 0 {
            let len = rng.range(0, 40) as usize;
            (0..len).map(|_| rng.next_u64() as u8).collect()
        } else {
            let mut v = encode(&random_state(&mut rng)).as_bytes().to_vec();
            let at = rng.range(0, v.len() as u64 - 1) as usize;
            v[at] = rng.next_u64() as u8;
            v
        };
        if let Ok(s) = decode(&bytes) {
            decoded += 1;
            assert_eq!(encode(&s).as_bytes(), &bytes[..], "not canonical");
        }
    }
    assert!(
        decoded > 1000,
        "mutations should often stay valid: {decoded}"
    );
}
