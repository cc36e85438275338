package minikafka.spark;

import java.nio.ByteBuffer;

import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Spark column vectors over one record batch of a segment file, read in place: the
 * batch's columnar body (shm/batch.py's layout) is already Arrow's binary layout, so a
 * value is its bytes between two entries of the offsets array. No copy until Spark asks
 * for a row's bytes; no per-record work for the columns a query does not read.
 */
final class Vectors {
    private Vectors() {}

    /** Every accessor unsupported; each vector overrides the one its type needs. */
    abstract static class Base extends ColumnVector {
        Base(DataType type) { super(type); }
        @Override public void close() {}
        @Override public boolean hasNull() { return false; }
        @Override public int numNulls() { return 0; }
        @Override public boolean isNullAt(int rowId) { return false; }
        @Override public boolean getBoolean(int rowId) { throw unsupported(); }
        @Override public byte getByte(int rowId) { throw unsupported(); }
        @Override public short getShort(int rowId) { throw unsupported(); }
        @Override public int getInt(int rowId) { throw unsupported(); }
        @Override public long getLong(int rowId) { throw unsupported(); }
        @Override public float getFloat(int rowId) { throw unsupported(); }
        @Override public double getDouble(int rowId) { throw unsupported(); }
        @Override public ColumnarArray getArray(int rowId) { throw unsupported(); }
        @Override public ColumnarMap getMap(int rowId) { throw unsupported(); }
        @Override public Decimal getDecimal(int rowId, int precision, int scale) { throw unsupported(); }
        @Override public UTF8String getUTF8String(int rowId) { throw unsupported(); }
        @Override public byte[] getBinary(int rowId) { throw unsupported(); }
        @Override public ColumnVector getChild(int ordinal) { throw unsupported(); }

        private UnsupportedOperationException unsupported() {
            return new UnsupportedOperationException(getClass().getSimpleName() + " of "
                + dataType().simpleString());
        }
    }

    /**
     * The keys or values of one batch: row i is entry {@code first + i}; its bytes are
     * {@code data[offsets[r], offsets[r + 1])}; null when the validity bitmap (if any)
     * has bit r clear (Arrow's bit order).
     */
    static final class Binary extends Base {
        private ByteBuffer buf;
        private int offsets, data, validity, first, rows;

        Binary(DataType type) { super(type); }

        void point(ByteBuffer buf, int offsets, int data, int validity, int first, int rows) {
            this.buf = buf;
            this.offsets = offsets;
            this.data = data;
            this.validity = validity;
            this.first = first;
            this.rows = rows;
        }

        @Override public boolean hasNull() { return validity >= 0 && numNulls() > 0; }

        @Override public int numNulls() {
            if (validity < 0) return 0;
            int nulls = 0;
            for (int i = 0; i < rows; i++) if (isNullAt(i)) nulls++;
            return nulls;
        }

        @Override public boolean isNullAt(int rowId) {
            if (validity < 0) return false;
            int r = first + rowId;
            return (buf.get(validity + (r >>> 3)) & (1 << (r & 7))) == 0;
        }

        @Override public byte[] getBinary(int rowId) {
            if (isNullAt(rowId)) return null;
            int r = first + rowId;
            int start = buf.getInt(offsets + 4 * r);
            int end = buf.getInt(offsets + 4 * r + 4);
            byte[] out = new byte[end - start];
            buf.get(data + start, out, 0, out.length);
            return out;
        }
    }

    /** Row i: {@code base + i} (offsets). */
    static final class Counting extends Base {
        private long base;
        Counting(DataType type) { super(type); }
        void point(long base) { this.base = base; }
        @Override public long getLong(int rowId) { return base + rowId; }
    }

    /** Row i: (base timestamp + delta[first + i]) ms, as Spark's microseconds. */
    static final class Timestamps extends Base {
        private ByteBuffer buf;
        private int deltas, first;
        private long baseMillis;
        Timestamps(DataType type) { super(type); }

        void point(ByteBuffer buf, int deltas, int first, long baseMillis) {
            this.buf = buf;
            this.deltas = deltas;
            this.first = first;
            this.baseMillis = baseMillis;
        }

        @Override public long getLong(int rowId) {
            return (baseMillis + buf.getInt(deltas + 4 * (first + rowId))) * 1000L;
        }
    }

    /** The same int in every row (partition, timestampType). */
    static final class ConstantInt extends Base {
        private final int value;
        ConstantInt(DataType type, int value) { super(type); this.value = value; }
        @Override public int getInt(int rowId) { return value; }
    }

    /** The same string in every row (topic). */
    static final class ConstantString extends Base {
        private final UTF8String value;
        ConstantString(DataType type, String value) {
            super(type);
            this.value = UTF8String.fromString(value);
        }
        @Override public UTF8String getUTF8String(int rowId) { return value; }
    }
}
