//! The protobuf wire format, read by hand: tags, varints, fixed-width numbers and
//! length-delimited payloads, each read checked against the end of the bytes.

/// What went wrong reading the wire; the caller names the message and field.
pub(crate) type WireError = &'static str;

/// A field's payload by wire type.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Payload<'de> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Len(&'de [u8]),
}

impl Payload<'_> {
    /// The wire type's number (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
    pub(crate) fn wire_type(&self) -> u8 {
        match self {
            Payload::Varint(_) => 0,
            Payload::Fixed64(_) => 1,
            Payload::Len(_) => 2,
            Payload::Fixed32(_) => 5,
        }
    }
}

/// A varint at `*pos`, which moves past it.
#[inline]
pub(crate) fn varint(bytes: &[u8], pos: &mut usize) -> Result<u64, WireError> {
    let mut value = 0u64;
    for shift in 0..10 {
        let Some(&byte) = bytes.get(*pos) else {
            return Err("a varint cut short by the end of the bytes");
        };
        *pos += 1;
        value |= u64::from(byte & 0x7f) << (shift * 7);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("a varint longer than 10 bytes")
}

/// The field number and payload of the field at `*pos`, which moves past it.
#[inline]
pub(crate) fn field<'de>(
    bytes: &'de [u8],
    pos: &mut usize,
) -> Result<(u32, Payload<'de>), WireError> {
    let tag = varint(bytes, pos)?;
    let number = u32::try_from(tag >> 3).map_err(|_| "a field number past 2^29")?;
    if number == 0 {
        return Err("field number 0");
    }
    let payload = match tag & 7 {
        0 => Payload::Varint(varint(bytes, pos)?),
        1 => Payload::Fixed64(u64::from_le_bytes(take::<8>(bytes, pos)?)),
        2 => {
            let length = varint(bytes, pos)?;
            let end = usize::try_from(length)
                .ok()
                .and_then(|l| pos.checked_add(l))
                .filter(|end| *end <= bytes.len())
                .ok_or("a length past the end of the bytes")?;
            let payload = &bytes[*pos..end];
            *pos = end;
            Payload::Len(payload)
        }
        5 => Payload::Fixed32(u32::from_le_bytes(take::<4>(bytes, pos)?)),
        3 | 4 => return Err("a group (wire types 3 and 4), which Kubernetes never writes"),
        _ => return Err("an unknown wire type"),
    };
    Ok((number, payload))
}

/// The number of the field at `pos`, without moving past it.
#[inline]
pub(crate) fn peek_number(bytes: &[u8], pos: usize) -> Option<u32> {
    let mut at = pos;
    varint(bytes, &mut at).ok().map(|tag| (tag >> 3) as u32)
}

fn take<const N: usize>(bytes: &[u8], pos: &mut usize) -> Result<[u8; N], WireError> {
    let end = pos.checked_add(N).filter(|end| *end <= bytes.len());
    let end = end.ok_or("a fixed-width number cut short by the end of the bytes")?;
    let mut out = [0; N];
    out.copy_from_slice(&bytes[*pos..end]);
    *pos = end;
    Ok(out)
}

/// The last occurrence of each of the fields `numbers` in a message: what protobuf reads
/// for a singular field written more than once. For the small special messages.
pub(crate) fn last_fields<'de, const N: usize>(
    bytes: &'de [u8],
    numbers: [u32; N],
) -> Result<[Option<Payload<'de>>; N], WireError> {
    let mut out = [None; N];
    let mut pos = 0;
    while pos < bytes.len() {
        let (number, payload) = field(bytes, &mut pos)?;
        if let Some(i) = numbers.iter().position(|n| *n == number) {
            out[i] = Some(payload);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_read_up_to_ten_bytes_and_refuse_cut_or_longer_ones() {
        let mut pos = 0;
        assert_eq!(varint(&[0xac, 0x02], &mut pos), Ok(300));
        assert_eq!(pos, 2);
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(varint(&max, &mut 0), Ok(u64::MAX));
        assert!(varint(&[0xff; 11], &mut 0).is_err());
        assert!(varint(&[0x80], &mut 0).is_err());
        assert!(field(&[0x0a, 0x05, b'a'], &mut 0).is_err(), "a length past the end");
        assert!(field(&[0x0b], &mut 0).is_err(), "a group");
        assert!(field(&[0x0d, 1, 2], &mut 0).is_err(), "a cut fixed32");
    }
}
