//! The W3C `traceparent` header value an item carries (`work_enqueue`'s `trace`, the claim rows'
//! `trace`, from 0.12.0): `00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>`
//! (<https://www.w3.org/TR/trace-context/#traceparent-header>). Parsed and formatted here without
//! OpenTelemetry, so that the rules are tested in every build; only the `otel` feature uses them.
#![cfg_attr(not(feature = "otel"), allow(dead_code))]

use std::fmt;

/// The version this library writes, and the only one whose exact length it requires.
const VERSION_00: u8 = 0x00;

/// The length of a version-00 `traceparent`: `2 + 1 + 32 + 1 + 16 + 1 + 2`.
const LEN_00: usize = 55;

/// One parsed `traceparent`: a span context as W3C Trace Context carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TraceParent {
    /// The trace id, 16 bytes, not all zero.
    pub(crate) trace_id: [u8; 16],
    /// The parent (enqueuer's) span id, 8 bytes, not all zero.
    pub(crate) span_id: [u8; 8],
    /// The trace flags (bit 0: sampled).
    pub(crate) flags: u8,
}

impl TraceParent {
    /// Parses `value` as the W3C spec tells a receiver to: lowercase hex only; version `ff` is
    /// invalid; version `00` is exactly 55 characters; a later version may carry more fields
    /// after a `-` at position 55, which are ignored (its first four are read as version 00's);
    /// an all-zero trace id or span id is invalid. `None` for anything else.
    pub(crate) fn parse(value: &str) -> Option<TraceParent> {
        let bytes = value.as_bytes();
        if bytes.len() < LEN_00 {
            return None;
        }
        let version = hex_byte(&bytes[0..2])?;
        if version == 0xff {
            return None;
        }
        let exact = bytes.len() == LEN_00;
        if !(exact || (version != VERSION_00 && bytes[LEN_00] == b'-')) {
            return None;
        }
        if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, byte) in trace_id.iter_mut().enumerate() {
            *byte = hex_byte(&bytes[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span_id = [0u8; 8];
        for (i, byte) in span_id.iter_mut().enumerate() {
            *byte = hex_byte(&bytes[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&bytes[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            flags,
        })
    }

    /// Whether the sampled flag (bit 0) is set.
    pub(crate) fn is_sampled(&self) -> bool {
        self.flags & 0x01 != 0
    }
}

impl fmt::Display for TraceParent {
    /// The version-00 header value, lowercase: `00-<trace id>-<span id>-<flags>`. Only the
    /// sampled flag is written, as the W3C spec's version 00 defines no other.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{VERSION_00:02x}-")?;
        for byte in self.trace_id {
            write!(f, "{byte:02x}")?;
        }
        f.write_str("-")?;
        for byte in self.span_id {
            write!(f, "{byte:02x}")?;
        }
        write!(f, "-{:02x}", self.flags & 0x01)
    }
}

/// One byte from two lowercase hex digits; `None` for anything else (uppercase included).
fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The W3C spec's example.
    const EXAMPLE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn the_specs_example_parses_and_formats_back_unchanged() {
        let tp = TraceParent::parse(EXAMPLE).expect("valid");
        assert_eq!(
            tp.trace_id,
            [
                0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80,
                0x31, 0x9c
            ]
        );
        assert_eq!(tp.span_id, [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31]);
        assert_eq!(tp.flags, 1);
        assert!(tp.is_sampled());
        assert_eq!(tp.to_string(), EXAMPLE);
        let unsampled = EXAMPLE.replace("-01", "-00");
        let tp = TraceParent::parse(&unsampled).expect("valid");
        assert!(!tp.is_sampled());
        assert_eq!(tp.to_string(), unsampled);
    }

    #[test]
    fn formatting_pads_every_field_and_writes_only_the_sampled_flag() {
        let tp = TraceParent {
            trace_id: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            span_id: [0, 0, 0, 0, 0, 0, 0, 2],
            flags: 0x03,
        };
        assert_eq!(
            tp.to_string(),
            "00-00000000000000000000000000000001-0000000000000002-01"
        );
        assert_eq!(
            TraceParent::parse(&tp.to_string()).map(|p| p.flags),
            Some(1)
        );
    }

    #[test]
    fn malformed_values_are_refused() {
        let bad = [
            "",
            "00",
            // Uppercase hex.
            "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
            // All-zero trace id, then all-zero span id.
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            // Version ff.
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            // Version 00 with anything after it.
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-010",
            // Short fields, wrong separators, non-hex.
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",
            "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c_b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331_01",
            "00-0af7651916cd43dd8448eb211c80319g-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333x-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0z",
            "0x-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            // A later version whose extra part does not begin with a dash.
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01x",
        ];
        for value in bad {
            assert_eq!(TraceParent::parse(value), None, "{value:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_as_version_00_and_its_extra_fields_ignored() {
        let later = "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-the-future-adds";
        let tp = TraceParent::parse(later).expect("a later version");
        assert_eq!(tp.to_string(), EXAMPLE);
        let exact = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(
            TraceParent::parse(exact).map(|p| p.to_string()).as_deref(),
            Some(EXAMPLE)
        );
    }
}
