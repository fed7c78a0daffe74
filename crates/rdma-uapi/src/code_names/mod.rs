//! [`code_names!`](crate::code_names): the one declaration of a type whose values have names,
//! for every crate that prints codes or closed sets (rdma-verbs' verbs codes, rdmakit's nldev
//! enumerations and catalog vocabulary).

/// Declares a type whose values have names: `Display` prints the name and `Serialize` writes
/// the same string. Three shapes, by what an unknown value becomes:
///
/// - A closed set spelled one way (`pub enum Unit { Bytes => "bytes", ... }`): an enum with
///   `ALL`, `NAMES`, `as_str()`, `parse()` (`None` for any other text) and `Deserialize`
///   (naming the allowed spellings on a wrong one). There are no unknown values.
/// - Codes with a catch-all (`pub enum Mtu: u32 { Mtu256 = 1 => "256", ... }`): the known
///   variants and `Unknown(raw)`, `ALL`, a total `from_raw()`, `raw()` and `name()`
///   (`"unknown"` for an unknown code, which `Display` prints as `unknown (9)`).
/// - A newtype over a kernel `u8` (`pub struct QpType(u8) else "UNKNOWN" { 2 => "RC", ... }`,
///   or `= lookup;` with a `fn(u8) -> Option<&'static str>` instead of the list): `name()`,
///   which gives the placeholder after `else` for a code without a name.
///
/// The serde impls name `::serde`: the calling crate depends on serde (rdma-uapi does not).
#[macro_export]
macro_rules! code_names {
    // Display and Serialize by a `fn(self) -> &'static str` (closed sets and newtypes).
    (@display $name:ident, $method:ident) => {
        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.$method())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(
                &self,
                s: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.$method())
            }
        }
    };

    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident => $text:literal ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $( $(#[$vmeta])* $variant ),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant ),+ ];
            /// Every spelling, in declaration order.
            pub const NAMES: &'static [&'static str] = &[ $( $text ),+ ];

            /// The spelling (in files and in JSON output).
            pub fn as_str(self) -> &'static str {
                match self { $( $name::$variant => $text ),+ }
            }

            /// Parses the spelling; `None` for anything else.
            pub fn parse(text: &str) -> ::std::option::Option<Self> {
                match text {
                    $( $text => ::std::option::Option::Some($name::$variant), )+
                    _ => ::std::option::Option::None,
                }
            }
        }

        $crate::code_names!(@display $name, as_str);

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                d: D,
            ) -> ::std::result::Result<Self, D::Error> {
                let text =
                    <::std::borrow::Cow<'de, str> as ::serde::Deserialize<'de>>::deserialize(d)?;
                $name::parse(&text).ok_or_else(|| {
                    <D::Error as ::serde::de::Error>::unknown_variant(&text, $name::NAMES)
                })
            }
        }
    };

    (
        $(#[$meta:meta])*
        pub enum $name:ident : $raw:ty {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr => $text:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
            /// A code this layer does not know (kept, never a panic).
            Unknown($raw),
        }

        impl $name {
            /// Every known variant, in code order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant ),* ];

            /// Convert a raw code; codes this layer does not know become `Unknown`.
            pub fn from_raw(raw: $raw) -> Self {
                $( if raw == $value { return $name::$variant; } )*
                $name::Unknown(raw)
            }

            /// The raw code.
            pub fn raw(self) -> $raw {
                match self {
                    $( $name::$variant => $value, )*
                    $name::Unknown(raw) => raw,
                }
            }

            /// The name (`"unknown"` for unknown codes).
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )*
                    $name::Unknown(_) => "unknown",
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                match self {
                    $name::Unknown(raw) => write!(f, "unknown ({raw})"),
                    known => f.write_str(known.name()),
                }
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(
                &self,
                s: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    };

    (
        $(#[$meta:meta])*
        pub struct $name:ident(u8) else $unknown:literal {
            $( $code:literal => $text:literal ),* $(,)?
        }
    ) => {
        $crate::code_names!(
            $(#[$meta])*
            pub struct $name(u8) else $unknown = |code: u8| match code {
                $( $code => ::std::option::Option::Some($text), )*
                _ => ::std::option::Option::None,
            };
        );
    };

    (
        $(#[$meta:meta])*
        pub struct $name:ident(u8) else $unknown:literal = $lookup:expr;
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(pub u8);

        impl $name {
            /// The name of this code (the placeholder for a code without one).
            pub fn name(self) -> &'static str {
                let lookup: fn(u8) -> ::std::option::Option<&'static str> = $lookup;
                lookup(self.0).unwrap_or($unknown)
            }
        }

        $crate::code_names!(@display $name, name);
    };
}

#[cfg(test)]
mod tests;
