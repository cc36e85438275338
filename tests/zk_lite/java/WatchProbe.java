// A real ZooKeeper 3.8 Java client that sets watches and keeps them across a reconnect.
//
// Usage: java -cp zookeeper.jar WatchProbe.java HOST:PORT/CHROOT
// Prints "STATE <state>" for connection events, "EVENT <type> <path>" for watch events,
// "READY 0x<session>" once its watches are set; on a line from stdin it prints
// "SESSION 0x<session> <state>", closes the session and prints "CLOSED".
// On reconnect the Java client re-arms its watches with SetWatches (kazoo never does).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;

public class WatchProbe {
    public static void main(String[] args) throws Exception {
        CountDownLatch connected = new CountDownLatch(1);
        Watcher watcher = (WatchedEvent event) -> {
            if (event.getType() == Watcher.Event.EventType.None) {
                System.out.println("STATE " + event.getState());
                if (event.getState() == Watcher.Event.KeeperState.SyncConnected) {
                    connected.countDown();
                }
            } else {
                System.out.println("EVENT " + event.getType() + " " + event.getPath());
            }
            System.out.flush();
        };
        ZooKeeper zk = new ZooKeeper(args[0], 5000, watcher);
        if (!connected.await(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("not connected within 30 s");
        }
        zk.getData("/n", true, null);
        zk.getChildren("/n", true);
        zk.exists("/later", true);
        zk.getData("/gone", true, null);
        System.out.println("READY 0x" + Long.toHexString(zk.getSessionId()));
        System.out.flush();
        new BufferedReader(new InputStreamReader(System.in)).readLine();
        System.out.println("SESSION 0x" + Long.toHexString(zk.getSessionId()) + " " + zk.getState());
        zk.close();
        System.out.println("CLOSED");
        System.out.flush();
    }
}
