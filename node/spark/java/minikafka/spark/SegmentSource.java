package minikafka.spark;

import java.io.IOException;
import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * {@code spark.read.format("minikafka.spark.SegmentSource").option("plan", json)}: a
 * topic's records read by the JVM straight from the leader's segment files (issue 29).
 *
 * <p>The driver's Python side (node/spark/segments.py) resolves the snapshot and walks the
 * logs once; the option "plan" is its JSON: a list of tasks, each a list of pieces
 * {topic, partition, path, ino, start, end, base, next, from, until}: the bytes
 * [start, end) of segment file path (inode ino) hold whole batches, the first with base
 * offset base, the last ending before offset next; rows are the records of offsets
 * [from, until) in them, control batches (transaction markers) left out. Offsets in
 * compacted logs have holes: batches only walk forward.
 *
 * <p>A task maps each piece read-only and checks what it reads (the file is the planned
 * one, long enough, each batch's magic, size and base offset, the walk ends where
 * planned); anything else fails the task with one clear message (the log changed since
 * the read was planned: plan the read again). Columns are {@link Vectors} over the
 * mapping: one ColumnarBatch per record batch, only the columns the query needs.
 */
public final class SegmentSource implements TableProvider {
    static final StructType SCHEMA = new StructType()
        .add("key", DataTypes.BinaryType)
        .add("value", DataTypes.BinaryType)
        .add("topic", DataTypes.StringType)
        .add("partition", DataTypes.IntegerType)
        .add("offset", DataTypes.LongType)
        .add("timestamp", DataTypes.TimestampType)
        .add("timestampType", DataTypes.IntegerType);

    @Override public StructType inferSchema(CaseInsensitiveStringMap options) { return SCHEMA; }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        String plan = properties.get("plan");
        if (plan == null) {
            throw new IllegalArgumentException("minikafka segment source: option \"plan\" is required "
                + "(use node.spark.read_segments)");
        }
        return new SegmentTable(parse(plan));
    }

    static Piece[][] parse(String text) {
        try {
            JsonNode tasks = new ObjectMapper().readTree(text);
            if (!tasks.isArray()) throw new IllegalArgumentException("not a list of tasks");
            Piece[][] out = new Piece[tasks.size()][];
            for (int t = 0; t < tasks.size(); t++) {
                JsonNode task = tasks.get(t);
                out[t] = new Piece[task.size()];
                for (int p = 0; p < task.size(); p++) out[t][p] = Piece.of(task.get(p));
            }
            return out;
        } catch (IOException | RuntimeException e) {
            throw new IllegalArgumentException("minikafka segment source: a bad option \"plan\": " + e, e);
        }
    }

    /** Whole batches [start, end) of one segment file; rows of offsets [from, until). */
    static final class Piece implements Serializable {
        private static final long serialVersionUID = 1L;
        final String topic, path;
        final int partition;
        final long ino, start, end, base, next, from, until;
        /** A spool file still being written (read_fetched): its bytes from 0 are read as
         *  they arrive, until offset until or the writer's done mark (end, base -1). */
        final boolean growing;

        Piece(String topic, int partition, String path, long ino, long start, long end,
              long base, long next, long from, long until) {
            this(topic, partition, path, ino, start, end, base, next, from, until, false);
        }

        Piece(String topic, int partition, String path, long ino, long start, long end,
              long base, long next, long from, long until, boolean growing) {
            this.topic = topic;
            this.partition = partition;
            this.path = path;
            this.ino = ino;
            this.start = start;
            this.end = end;
            this.base = base;
            this.next = next;
            this.from = from;
            this.until = until;
            this.growing = growing;
            if (growing ? start != 0 || until <= from
                    : start < 0 || end <= start || end - start > Integer.MAX_VALUE || next <= base || until <= from) {
                throw new IllegalArgumentException("a piece out of shape: " + this);
            }
        }

        static Piece of(JsonNode n) {
            return new Piece(n.get("topic").asText(), n.get("partition").asInt(), n.get("path").asText(),
                n.get("ino").asLong(), n.get("start").asLong(), n.get("end").asLong(), n.get("base").asLong(),
                n.get("next").asLong(), n.get("from").asLong(), n.get("until").asLong(),
                n.has("growing") && n.get("growing").asBoolean());
        }

        @Override public String toString() {
            return topic + "-" + partition + " " + path + " bytes [" + start + ", " + end + ") offsets ["
                + base + ", " + next + ") rows [" + from + ", " + until + ")";
        }
    }

    static final class SegmentTable implements Table, SupportsRead {
        private final Piece[][] plan;
        SegmentTable(Piece[][] plan) { this.plan = plan; }
        @Override public String name() { return "minikafka-segments"; }
        @Override public StructType schema() { return SCHEMA; }
        @Override public Set<TableCapability> capabilities() { return EnumSet.of(TableCapability.BATCH_READ); }
        @Override public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) { return new Builder(plan); }
    }

    static final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns {
        private final Piece[][] plan;
        private StructType required = SCHEMA;
        Builder(Piece[][] plan) { this.plan = plan; }

        @Override public void pruneColumns(StructType requiredSchema) {
            StructType kept = new StructType();
            for (StructField f : SCHEMA.fields()) {
                if (requiredSchema.getFieldIndex(f.name()).isDefined()) kept = kept.add(f);
            }
            required = kept;
        }

        @Override public Scan build() { return new SegmentScan(plan, required); }
    }

    static final class SegmentScan implements Scan, Batch {
        private final Piece[][] plan;
        private final StructType schema;
        SegmentScan(Piece[][] plan, StructType schema) { this.plan = plan; this.schema = schema; }
        @Override public StructType readSchema() { return schema; }
        @Override public String description() { return "minikafka segments (" + plan.length + " tasks)"; }
        @Override public Batch toBatch() { return this; }

        @Override public InputPartition[] planInputPartitions() {
            InputPartition[] out = new InputPartition[plan.length];
            for (int i = 0; i < plan.length; i++) out[i] = new Task(plan[i]);
            return out;
        }

        @Override public PartitionReaderFactory createReaderFactory() { return new Factory(schema.fieldNames()); }
    }

    static final class Task implements InputPartition {
        private static final long serialVersionUID = 1L;
        final Piece[] pieces;
        Task(Piece[] pieces) { this.pieces = pieces; }
    }

    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final String[] columns;
        Factory(String[] columns) { this.columns = columns; }

        @Override public boolean supportColumnarReads(InputPartition partition) { return true; }

        @Override public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("minikafka segment source reads columnar batches only");
        }

        @Override public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            return new SegmentReader(((Task) partition).pieces, columns);
        }
    }

    /**
     * A failed check of what a task read: the log is not what was planned. A JDK class,
     * so that a driver without the jar on its class path (ADD JAR) still reads it.
     */
    static IllegalStateException failed(Piece piece, String what) {
        return new IllegalStateException("minikafka segment reader: " + piece + ": " + what
            + " (the log changed since the read was planned: plan the read again)");
    }

    /** The batch layout (shm/batch_format.py). */
    static final int HEADER_BYTES = 61, LENGTH_OVERHEAD = 12, MAGIC = 2;
    static final int ATTR_CONTROL = 0x20, ATTR_KEY_NULLS = 0x100, ATTR_VALUE_NULLS = 0x200;

    static final class SegmentReader implements PartitionReader<ColumnarBatch> {
        private final Piece[] pieces;
        private final String[] columns;
        private int pieceIndex = -1;
        private Piece piece;
        private ByteBuffer buf;
        private int pos;
        private long walked;          // the next offset after the last batch walked
        private final Vectors.Binary keys = new Vectors.Binary(DataTypes.BinaryType);
        private final Vectors.Binary values = new Vectors.Binary(DataTypes.BinaryType);
        private final Vectors.Counting offsets = new Vectors.Counting(DataTypes.LongType);
        private final Vectors.Timestamps timestamps = new Vectors.Timestamps(DataTypes.TimestampType);
        private ColumnarBatch batch;
        private final Map<String, ColumnVector> perPiece = new java.util.HashMap<>();

        SegmentReader(Piece[] pieces, String[] columns) {
            this.pieces = pieces;
            this.columns = columns;
        }

        @Override public boolean next() throws IOException {
            while (true) {
                if (piece != null && piece.growing) {
                    if (walked >= piece.until || !wholeBatchMapped() && !grow()) {
                        closeChannel();
                        buf = null;
                        piece = null;
                        continue;
                    }
                } else if (buf == null || pos >= buf.limit()) {
                    if (buf != null && walked != piece.next) {
                        throw failed(piece, "the batches end at offset " + walked);
                    }
                    if (++pieceIndex >= pieces.length) return false;
                    open(pieces[pieceIndex]);
                    if (piece.growing) continue;
                }
                if (readBatch()) return true;
            }
        }

        // A growing piece: the mapping covers file bytes [mapped, mapped + buf.limit()).
        private FileChannel channel;
        private long mapped;
        static final long GROW_WAIT_MS = 120_000, GROW_POLL_NS = 200_000;

        /** Whether the batch at pos lies whole in the mapping. */
        private boolean wholeBatchMapped() {
            if (pos + LENGTH_OVERHEAD > buf.limit()) return false;
            return pos + buf.getInt(pos + 8) + (long) LENGTH_OVERHEAD <= buf.limit();
        }

        /** Map what the writer added after pos, waiting for it; false once the writer
         *  marked the file done and no byte is left (the range's rest was compacted away). */
        private boolean grow() throws IOException {
            Piece p = piece;
            long from = mapped + pos;
            long deadline = System.nanoTime() + GROW_WAIT_MS * 1_000_000L;
            Path failedMark = Paths.get(p.path + ".failed"), doneMark = Paths.get(p.path + ".done");
            while (true) {
                boolean done = Files.exists(doneMark);     // before the size: then the size is final
                long size = channel.size();
                long need = from + LENGTH_OVERHEAD;
                if (size >= need) {
                    ByteBuffer head = channel.map(FileChannel.MapMode.READ_ONLY, from, LENGTH_OVERHEAD)
                        .order(ByteOrder.LITTLE_ENDIAN);
                    need = from + head.getInt(8) + (long) LENGTH_OVERHEAD;
                }
                if (size >= need) {
                    if (size - from > Integer.MAX_VALUE) size = from + Integer.MAX_VALUE;
                    buf = channel.map(FileChannel.MapMode.READ_ONLY, from, size - from)
                        .order(ByteOrder.LITTLE_ENDIAN);
                    mapped = from;
                    pos = 0;
                    return true;
                }
                if (Files.exists(failedMark)) {
                    throw failed(p, "the fetch failed: " + new String(Files.readAllBytes(failedMark),
                        java.nio.charset.StandardCharsets.UTF_8));
                }
                if (done) {
                    if (size != from) throw failed(p, "the spool ends inside a batch at byte " + from);
                    return false;
                }
                if (!Files.exists(Paths.get(p.path))) throw failed(p, "the file is gone");
                if (System.nanoTime() > deadline) {
                    throw failed(p, "no bytes after byte " + from + " for " + GROW_WAIT_MS / 1000 + " s");
                }
                java.util.concurrent.locks.LockSupport.parkNanos(GROW_POLL_NS);
            }
        }

        private void closeChannel() throws IOException {
            if (channel != null) {
                channel.close();
                channel = null;
            }
        }

        private void open(Piece p) throws IOException {
            piece = p;
            Path path = Paths.get(p.path);
            if (p.growing) {
                try {
                    channel = FileChannel.open(path, StandardOpenOption.READ);
                } catch (NoSuchFileException e) {
                    throw failed(p, "the file is gone");
                }
                long ino = ((Number) Files.getAttribute(path, "unix:ino")).longValue();
                if (ino != p.ino) throw failed(p, "the file was replaced (inode " + ino + ")");
                buf = ByteBuffer.allocate(0).order(ByteOrder.LITTLE_ENDIAN);
                mapped = 0;
                pos = 0;
                walked = -1;
                batch = columnarBatch(p);
                return;
            }
            mapped = 0;
            try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ)) {
                long ino = ((Number) Files.getAttribute(path, "unix:ino")).longValue();
                if (ino != p.ino) throw failed(p, "the file was replaced (inode " + ino + ")");
                long size = channel.size();
                if (size < p.end) throw failed(p, "the file has only " + size + " bytes");
                buf = channel.map(FileChannel.MapMode.READ_ONLY, p.start, p.end - p.start)
                    .order(ByteOrder.LITTLE_ENDIAN);
            } catch (NoSuchFileException e) {
                throw failed(p, "the file is gone");
            }
            pos = 0;
            walked = -1;
            batch = columnarBatch(p);
        }

        /** The batch of a piece: the query's columns, pointed at each record batch. */
        private ColumnarBatch columnarBatch(Piece p) {
            ColumnVector[] vectors = new ColumnVector[columns.length];
            for (int i = 0; i < columns.length; i++) vectors[i] = vector(columns[i], p);
            return new ColumnarBatch(vectors);
        }

        private ColumnVector vector(String column, Piece p) {
            switch (column) {
                case "key": return keys;
                case "value": return values;
                case "offset": return offsets;
                case "timestamp": return timestamps;
                case "topic": return perPiece.computeIfAbsent("topic\0" + p.topic,
                    k -> new Vectors.ConstantString(DataTypes.StringType, p.topic));
                case "partition": return perPiece.computeIfAbsent("partition\0" + p.partition,
                    k -> new Vectors.ConstantInt(DataTypes.IntegerType, p.partition));
                case "timestampType": return perPiece.computeIfAbsent("timestampType",
                    k -> new Vectors.ConstantInt(DataTypes.IntegerType, 0));
                default: throw new IllegalArgumentException("no column " + column);
            }
        }

        /** Walk one batch at pos; true if it has rows (the vectors then point at them). */
        private boolean readBatch() {
            Piece p = piece;
            int at = pos;
            if (at + HEADER_BYTES > buf.limit()) {
                throw failed(p, "a batch header at byte " + (p.start + at) + " runs past the piece");
            }
            long base = buf.getLong(at);
            long size = buf.getInt(at + 8) + (long) LENGTH_OVERHEAD;
            byte magic = buf.get(at + 16);
            if (magic != MAGIC) {
                throw failed(p, "no batch at byte " + (p.start + mapped + at) + " (magic " + magic + ")");
            }
            if (size < HEADER_BYTES || at + size > buf.limit()) {
                throw failed(p, "the batch at byte " + (p.start + at) + " of " + size
                    + " bytes runs past the piece");
            }
            if (p.growing ? walked >= 0 && base < walked : walked < 0 ? base != p.base : base < walked) {
                throw failed(p, "the batch at byte " + (p.start + at) + " has base offset "
                    + base + ", expected " + (walked < 0 ? "" : "at least ") + (walked < 0 ? p.base : walked));
            }
            int attributes = buf.getShort(at + 21);
            int lastDelta = buf.getInt(at + 23);
            long baseMillis = buf.getLong(at + 27);
            int n = buf.getInt(at + 57);
            if (n < 1 || lastDelta != n - 1) {
                throw failed(p, "the batch at offset " + base + " has " + n
                    + " records and last offset delta " + lastDelta);
            }
            pos = at + (int) size;
            walked = base + n;
            if ((attributes & ATTR_CONTROL) != 0) return false;
            long first = Math.max(0, p.from - base), last = Math.min(n, p.until - base);
            if (last <= first) return false;
            int deltas = at + HEADER_BYTES;
            int keyOffsets = deltas + 4 * n;
            int valueOffsets = keyOffsets + 4 * (n + 1);
            int keyData = valueOffsets + 4 * (n + 1);
            int valueData = keyData + buf.getInt(keyOffsets + 4 * n);
            int after = valueData + buf.getInt(valueOffsets + 4 * n);
            int bitmap = (n + 7) / 8;
            int keyValidity = -1, valueValidity = -1;
            if ((attributes & ATTR_KEY_NULLS) != 0) { keyValidity = after; after += bitmap; }
            if ((attributes & ATTR_VALUE_NULLS) != 0) { valueValidity = after; after += bitmap; }
            if (valueData < keyData || after < valueData || after > pos) {
                throw failed(p, "the batch at offset " + base + " has a body out of shape");
            }
            int rows = (int) (last - first);
            keys.point(buf, keyOffsets, keyData, keyValidity, (int) first, rows);
            values.point(buf, valueOffsets, valueData, valueValidity, (int) first, rows);
            offsets.point(base + first);
            timestamps.point(buf, deltas, (int) first, baseMillis);
            batch.setNumRows(rows);
            return true;
        }

        @Override public ColumnarBatch get() { return batch; }

        @Override public void close() throws IOException {
            buf = null;
            closeChannel();
        }
    }
}
