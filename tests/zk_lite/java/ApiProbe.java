// Drives the ZooKeeper 3.8 Java API from stdin, one command per line, for the calls
// kazoo never makes (addWatch, whoAmI, getEphemerals, getAllChildrenNumber, create2).
//
// Usage: java -cp zookeeper.jar ApiProbe.java HOST:PORT/CHROOT
// Prints "READY", then per command one "OK ..." or "ERR <code name>" line; watch events
// as "EVENT <type> <path>" at any time. "quit" closes the session and exits.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.zookeeper.AddWatchMode;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.ClientInfo;
import org.apache.zookeeper.data.Stat;

public class ApiProbe {
    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        CountDownLatch connected = new CountDownLatch(1);
        Watcher watcher = event -> {
            if (event.getType() == Watcher.Event.EventType.None) {
                if (event.getState() == Watcher.Event.KeeperState.SyncConnected) {
                    connected.countDown();
                }
            } else {
                say("EVENT " + event.getType() + " " + event.getPath());
            }
        };
        ZooKeeper zk = new ZooKeeper(args[0], 5000, watcher);
        if (!connected.await(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("not connected within 30 s");
        }
        say("READY");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            try {
                switch (w[0]) {
                    case "addWatch":
                        zk.addWatch(w[1], w[2].equals("recursive")
                                ? AddWatchMode.PERSISTENT_RECURSIVE : AddWatchMode.PERSISTENT);
                        say("OK");
                        break;
                    case "addAuth":
                        zk.addAuthInfo(w[1], w[2].getBytes("UTF-8"));
                        say("OK");
                        break;
                    case "whoAmI":
                        List<String> ids = new ArrayList<>();
                        for (ClientInfo info : zk.whoAmI()) {
                            ids.add(info.getAuthScheme() + ":" + info.getUser());
                        }
                        Collections.sort(ids);
                        say("OK " + String.join(",", ids));
                        break;
                    case "createEphemeral":
                        say("OK " + zk.create(w[1], new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE,
                                CreateMode.EPHEMERAL));
                        break;
                    case "create2":
                        Stat stat = new Stat();
                        String path = zk.create(w[1], w[2].getBytes("UTF-8"),
                                ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT_SEQUENTIAL, stat);
                        say("OK " + path + " " + stat.getVersion() + " " + stat.getDataLength()
                                + " " + (stat.getCzxid() > 0));
                        break;
                    case "getEphemerals":
                        List<String> eph = new ArrayList<>(zk.getEphemerals(w[1]));
                        Collections.sort(eph);
                        say("OK " + String.join(",", eph));
                        break;
                    case "allChildren":
                        say("OK " + zk.getAllChildrenNumber(w[1]));
                        break;
                    case "quit":
                        zk.close();
                        say("OK closed");
                        return;
                    default:
                        say("ERR unknown command " + w[0]);
                }
            } catch (KeeperException e) {
                say("ERR " + e.code());
            }
        }
    }
}
