import FerryCore
import FerryMySQL
import FerryPostgres
import FerrySQLite

extension DriverRegistry {
    /// Every driver compiled into Ferry: the one place that lists them.
    public static var builtIn: DriverRegistry {
        DriverRegistry([SQLiteDriver(), PostgresDriver(), MySQLDriver()])
    }
}
