//! A `jsonb` value carried through the extension byte for byte.
//!
//! pgrx's `JsonB` parses into a `serde_json::Value` and prints it back, which
//! costs a parse per item and rounds numbers beyond an f64 (a payload
//! `{"n": 12345678901234567890123}` would come back changed). A payload is the
//! user's data, so the extension never interprets it: [`RawJsonb`] holds the
//! detoasted on-disk bytes and hands them back unchanged.

use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::{Datum, UnboxDatum};
use pgrx::nullable::Nullable;
use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::prelude::*;

/// The binary body of a `jsonb` datum (without the varlena header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawJsonb(pub Vec<u8>);

impl FromDatum for RawJsonb {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        typoid: pg_sys::Oid,
    ) -> Option<Self> {
        // SAFETY: the caller promises `datum` is a jsonb (a varlena) when not
        // null; Vec<u8>'s conversion detoasts it and copies the body.
        unsafe { Vec::<u8>::from_polymorphic_datum(datum, is_null, typoid).map(RawJsonb) }
    }
}

impl IntoDatum for RawJsonb {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        // A varlena is a varlena: the bytes become a palloc'd datum with a
        // 4-byte header, which is what jsonb's body was read from.
        self.0.into_datum()
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

// SAFETY: RawJsonb is exactly a jsonb datum on the SQL side.
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
