import FerryCore
import FerryMySQL
import FerryPostgres
import FerrySQLite
import FerryXML

extension DriverRegistry {
    /// Every driver compiled into Ferry: the one place that lists them.
    public static var builtIn: DriverRegistry {
        DriverRegistry([SQLiteDriver(), PostgresDriver(), MySQLDriver(), HTTPDriver()])
    }
}
