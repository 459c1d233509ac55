// ferry-driver-sqlitekit: Ferry's own SQLite driver as a driver plugin, through FerryPluginKit.
// `ferry copy sqlitekit:in.db sqlite:out.db` then reads in.db over this program's stdin and
// stdout — the tests use it to prove the plugin transport against a driver they know.
import FerryPluginKit
import FerrySQLite

FerryPlugin.main(driver: SQLiteDriver(), name: "ferry-driver-sqlitekit", version: "0.1.0")
