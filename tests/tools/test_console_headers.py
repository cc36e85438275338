"""Record headers in the console tools, pure parts: Kafka's LineMessageReader
(``parse.headers``, its separators, ``null.marker``, ``ignore.error``) and
DefaultMessageFormatter (``print.headers``)."""
from __future__ import annotations

import io

import pytest

from node.client import ConsumerRecord
from node.tools.common import ToolError
from node.tools.console import Formatter, LineReader, _lines


def test_headers_then_key_then_value():
    reader = LineReader({"parse.headers": "true", "parse.key": "true"})
    assert reader.parse(1, b"a:1,a:2,\xc3\xa9:x\tkey\tva:l,ue") == \
        (b"va:l,ue", b"key", [("a", b"1"), ("a", b"2"), ("\u00e9", b"x")])
    assert reader.parse(2, b"h:\tk\tv") == (b"v", b"k", [("h", b"")])
    assert reader.parse(3, b"h:1,,\tk\tv")[2] == [("h", b"1")]      # Java's split
    headers_only = LineReader({"parse.headers": "true"})
    assert headers_only.parse(1, b"h:v\tkey\tvalue") == (b"key\tvalue", None, [("h", b"v")])


def test_custom_separators_and_null_marker():
    reader = LineReader({"parse.headers": "true", "parse.key": "true",
                         "headers.delimiter": "|", "headers.separator": ";",
                         "headers.key.separator": "=", "key.separator": "#",
                         "null.marker": "NULL"})
    assert reader.parse(1, b"a=NULL;b=2|NULL#NULL") == (None, None, [("a", None), ("b", b"2")])
    assert reader.parse(2, b"NULL|k#v") == (b"v", b"k", None)
    with pytest.raises(ToolError, match="Header keys should not be equal to the null marker"):
        reader.parse(3, b"NULL=x|k#v")


def test_missing_separators_are_errors_unless_ignored():
    strict = LineReader({"parse.headers": "true", "parse.key": "true"})
    with pytest.raises(ToolError, match="No headers delimiter found on line number 4"):
        strict.parse(4, b"no delimiter")
    with pytest.raises(ToolError, match="No header key separator found in pair 'bare' on "
                                        "line number 5"):
        strict.parse(5, b"bare\tk\tv")
    with pytest.raises(ToolError, match="No key separator found on line number 6"):
        strict.parse(6, b"h:1\tkv")
    lenient = LineReader({"parse.headers": "true", "parse.key": "true",
                          "ignore.error": "true"})
    assert lenient.parse(1, b"bare,h:1\tk\tv") == (b"v", b"k", [("bare", None), ("h", b"1")])
    assert lenient.parse(2, b"just a value") == (b"just a value", None, None)


@pytest.mark.parametrize("props, message", [
    ({"headers.delimiter": ",", "headers.separator": ","},
     "headers.delimiter and headers.separator may not be equal"),
    ({"headers.delimiter": ":"}, "headers.delimiter and headers.key.separator may not be equal"),
    ({"headers.separator": ":"}, "headers.separator and headers.key.separator may not be equal"),
    ({"null.marker": "\\t", "headers.delimiter": "|"},
     "null.marker and key.separator may not be equal"),
    ({"null.marker": ","}, "headers.separator and null.marker may not be equal"),
    ({"headers.separator": ""}, "headers.separator may not be empty"),
])
def test_conflicting_separators_are_refused(props, message):
    with pytest.raises(ToolError, match=message):
        LineReader(props)


def test_lines_are_numbered_and_stripped():
    reader = LineReader({"parse.headers": "true"})
    stream = io.BytesIO(b"a:1\tone\r\nb:2\ttwo\n")
    assert list(_lines(stream, reader, prompt=False)) == \
        [(1, b"one", None, [("a", b"1")]), (2, b"two", None, [("b", b"2")])]


def test_print_headers_as_kafkas_formatter():
    record = ConsumerRecord("t", 0, 3, 9, b"k", b"v",
                            [("a", b"1"), ("a", None), ("\udcff", b"")])
    f = Formatter({"print.headers": "true", "print.key": "true"})
    assert f.format(record) == b"a:1,a:null,\xff:\tk\tv\n"
    assert f.format(record._replace(headers=[])) == b"NO_HEADERS\tk\tv\n"
    assert f.format(ConsumerRecord("t", 0, 3, 9, b"k", b"v")) == b"NO_HEADERS\tk\tv\n"
    custom = Formatter({"print.headers": "true", "headers.separator": "|",
                        "null.literal": "-", "print.offset": "true"})
    assert custom.format(record) == b"Offset:3\ta:1|a:-|\xff:\tv\n"
    assert Formatter({}).format(record) == b"v\n"
