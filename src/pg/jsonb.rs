//! A `jsonb` value carried through the extension byte for byte.
//!
//! pgrx's `JsonB` parses into a `serde_json::Value` and prints it back, which
//! costs a parse per item and rounds numbers beyond an f64 (a payload
//! `{"n": 12345678901234567890123}` would come back changed). A payload is the
//! user's data, so the extension never interprets it: [`RawJsonb`] holds the
//! datum's varlena exactly as it was given, header included, and hands it
//! back unchanged.
//!
//! It is not detoasted either: a payload read from the table arrives as a
//! TOAST pointer (18 bytes) when it was stored out of line, and the claim
//! keeps that pointer rather than a copy. PostgreSQL fetches the value when
//! it forms each result row (a set-returning function's row is a composite
//! datum, which may not hold TOAST pointers, so pgrx's
//! `HeapTupleHeaderGetDatum` flattens it), one row at a time: a claim of
//! 1,000 items of 1 MB holds one payload at a time rather than two copies
//! of all of them, but still reads each payload once (`harness/tests/client/memory.rs`).

use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::{Datum, UnboxDatum};
use pgrx::nullable::Nullable;
use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;

/// A `jsonb` datum's varlena, byte for byte: header included, possibly a
/// TOAST pointer or a compressed value (see the module comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawJsonb(pub Vec<u8>);

impl RawJsonb {
    /// The value's size uncompressed and in line, header included, in
    /// bytes (`toast_raw_datum_size`): what a TOAST pointer or a compressed
    /// datum stands for, not the few bytes it takes here.
    pub fn raw_size(&self) -> usize {
        // SAFETY: the bytes are a whole varlena (any header form); the
        // function reads its header only, and for an external pointer the
        // pointer's own fields.
        unsafe { pg_sys::toast_raw_datum_size(pg_sys::Datum::from(self.0.as_ptr())) }
    }
}

impl FromDatum for RawJsonb {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _typoid: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null {
            return None;
        }
        let ptr = datum.cast_mut_ptr::<pg_sys::varlena>() as *const pg_sys::varlena;
        // SAFETY: a non-NULL jsonb datum points at a varlena of this size
        // (any header form: 1-byte, 4-byte, external, compressed).
        unsafe {
            let size = pgrx::varlena::varsize_any(ptr);
            Some(RawJsonb(
                std::slice::from_raw_parts(ptr as *const u8, size).to_vec(),
            ))
        }
    }
}

impl IntoDatum for RawJsonb {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        // SAFETY: palloc in the current memory context, then a copy of the
        // varlena's own bytes (its header says its size).
        unsafe {
            let ptr = pg_sys::palloc(self.0.len()) as *mut u8;
            std::ptr::copy_nonoverlapping(self.0.as_ptr(), ptr, self.0.len());
            Some(pg_sys::Datum::from(ptr))
        }
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

unsafe impl SqlTranslatable for RawJsonb {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(RawJsonb);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("jsonb"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("jsonb")));
}

// SAFETY: a jsonb argument is a varlena datum, which FromDatum reads.
unsafe impl<'fcx> ArgAbi<'fcx> for RawJsonb {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        // SAFETY: forwarded from the caller (the argument is a non-null jsonb).
        unsafe { arg.unbox_arg_using_from_datum() }
            .unwrap_or_else(|| panic!("argument {index} must not be null"))
    }

    unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
        // SAFETY: forwarded from the caller (the argument is a jsonb or NULL).
        unsafe { arg.unbox_arg_using_from_datum() }.into()
    }
}

// SAFETY: the datum returned is a freshly palloc'd varlena in the function's
// memory context.
unsafe impl BoxRet for RawJsonb {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        match self.into_datum() {
            // SAFETY: the datum is a valid jsonb varlena.
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

// SAFETY: array elements of a jsonb[] are non-null, detoasted varlenas.
unsafe impl UnboxDatum for RawJsonb {
    type As<'src> = RawJsonb;

    unsafe fn unbox<'src>(datum: Datum<'src>) -> Self::As<'src>
    where
        Self: 'src,
    {
        // SAFETY: the element is a non-null jsonb (see the impl's comment).
        unsafe { RawJsonb::from_datum(datum.sans_lifetime(), false) }
            .expect("a non-null jsonb array element")
    }
}
