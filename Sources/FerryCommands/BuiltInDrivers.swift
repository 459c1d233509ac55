import FerryCore
import FerryKit

extension DriverRegistry {
    /// Every driver compiled into Ferry: FerryKit's list, the one place that names them.
    public static var builtIn: DriverRegistry { FerryKit.Ferry.drivers }
}
