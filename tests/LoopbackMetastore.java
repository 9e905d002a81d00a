import java.lang.reflect.Method;
import java.net.InetSocketAddress;

import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TServer;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TTransportFactory;

/**
 * A Hive Metastore's Thrift service on 127.0.0.1 only, for the tests (tests/hive_metastore.py):
 * HiveMetaStore's own main binds every interface and has no setting for the address. This
 * serves the same handler (HiveMetaStore.newRetryingHMSHandler, the metastore's configuration
 * from the hive-site.xml / metastore-site.xml first on the class path) with Thrift's plain
 * binary protocol, as `HiveMetaStore -p PORT` does without SASL.
 *
 * Works with Hive 2.3 (pyspark's jars: the handler takes a HiveConf) and the standalone
 * metastore 3.1 (it takes a Configuration, MetastoreConf's): both found by reflection.
 * Run as a single-file program: java -cp 'JARS/*:CONFDIR' LoopbackMetastore.java PORT
 */
public class LoopbackMetastore {
  public static void main(String[] args) throws Exception {
    int port = Integer.parseInt(args[0]);
    Object conf;
    Class<?> confClass;
    try {
      confClass = Class.forName("org.apache.hadoop.hive.metastore.conf.MetastoreConf");
      conf = confClass.getMethod("newMetastoreConf").invoke(null);
    } catch (ClassNotFoundException e) {
      confClass = Class.forName("org.apache.hadoop.hive.conf.HiveConf");
      conf = confClass.getConstructor().newInstance();
    }
    Object handler = null;
    // public in 2.3, package-private in 3.1
    for (Method m : HiveMetaStore.class.getDeclaredMethods()) {
      if (m.getName().equals("newRetryingHMSHandler") && m.getParameterCount() == 3
          && m.getParameterTypes()[0] == String.class && m.getParameterTypes()[1].isInstance(conf)) {
        m.setAccessible(true);
        handler = m.invoke(null, "loopback metastore", conf, false);
        break;
      }
    }
    if (handler == null) throw new IllegalStateException("no HiveMetaStore.newRetryingHMSHandler for " + conf.getClass());
    ThriftHiveMetastore.Processor<ThriftHiveMetastore.Iface> processor =
        new ThriftHiveMetastore.Processor<>((ThriftHiveMetastore.Iface) handler);
    TServerSocket socket = new TServerSocket(new InetSocketAddress("127.0.0.1", port));
    TServer server = new TThreadPoolServer(new TThreadPoolServer.Args(socket).processor(processor)
        .transportFactory(new TTransportFactory()).protocolFactory(new TBinaryProtocol.Factory())
        .minWorkerThreads(2).maxWorkerThreads(16));
    System.out.println("LOOPBACK_METASTORE_SERVING 127.0.0.1:" + port);
    System.out.flush();
    server.serve();
  }
}
